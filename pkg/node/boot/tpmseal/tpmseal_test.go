package tpmseal

import (
	"bytes"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/swtpm"
)

var secret = bytes.Repeat([]byte{0x5a, 0xa5}, 32)

func TestSealUnseal(t *testing.T) {
	tpm := swtpm.Start(t, "")
	tpm.Extend(t, SecureBootPCR, "SecureBoot=1 PK KEK db dbx")
	s, err := Seal(tpm, secret, []int{SecureBootPCR})
	require.NoError(t, err)
	assert.Equal(t, []int{SecureBootPCR}, s.PCRs)
	assert.NotContains(t, string(s.Private), string(secret[:16]), "the private part is encrypted")

	// Stored and read back, as from a disk's header.
	b, err := s.Marshal()
	require.NoError(t, err)
	s2, err := Parse(b)
	require.NoError(t, err)
	got, err := Unseal(tpm, s2)
	require.NoError(t, err)
	assert.Equal(t, secret, got)

	// Another PCR changing does not matter.
	tpm.Extend(t, 4, "another boot loader")
	got, err = Unseal(tpm, s2)
	require.NoError(t, err)
	assert.Equal(t, secret, got)
}

func TestUnsealRefusedWhenSecureBootStateChanges(t *testing.T) {
	tpm := swtpm.Start(t, "")
	tpm.Extend(t, SecureBootPCR, "SecureBoot=1 PK KEK db dbx")
	s, err := Seal(tpm, secret, []int{SecureBootPCR})
	require.NoError(t, err)
	tpm.Extend(t, SecureBootPCR, "db: another certificate")
	got, err := Unseal(tpm, s)
	require.ErrorIs(t, err, ErrPolicy)
	assert.Nil(t, got)
	assert.Contains(t, err.Error(), "PCRs [7]")
}

func TestUnsealSurvivesARestartOfTheSameTPM(t *testing.T) {
	dir := t.TempDir()
	tpm := swtpm.Start(t, dir)
	s, err := Seal(tpm, secret, []int{SecureBootPCR})
	require.NoError(t, err)
	tpm.Stop()
	// Same state directory, the PCRs reset by the restart and (here)
	// measured the same way again: nothing to measure, so both zero.
	tpm2 := swtpm.Start(t, dir)
	got, err := Unseal(tpm2, s)
	require.NoError(t, err)
	assert.Equal(t, secret, got)
}

func TestUnsealRefusedOnAnotherTPM(t *testing.T) {
	s, err := Seal(swtpm.Start(t, ""), secret, []int{SecureBootPCR})
	require.NoError(t, err)
	_, err = Unseal(swtpm.Start(t, ""), s)
	require.ErrorIs(t, err, ErrOtherTPM)
}

func TestSealChecksItsArguments(t *testing.T) {
	tpm := swtpm.Start(t, "")
	for name, tc := range map[string]struct {
		secret []byte
		pcrs   []int
		want   string
	}{
		"empty secret":    {nil, []int{7}, "a secret of 0 bytes"},
		"too long secret": {make([]byte, MaxSecret+1), []int{7}, "a secret of 129 bytes"},
		"no PCRs":         {secret, nil, "none named"},
		"PCR 24":          {secret, []int{24}, "PCRs 0 to 23"},
		"unordered":       {secret, []int{7, 4}, "in order"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Seal(tpm, tc.secret, tc.pcrs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestParseRefusesWhatUnsealWouldMisuse(t *testing.T) {
	tpm := swtpm.Start(t, "")
	s, err := Seal(tpm, secret, []int{SecureBootPCR})
	require.NoError(t, err)
	// An object that also opens with a password, carrying our policy.
	withPassword := tpm2.Marshal(tpm2.New2B(tpm2.TPMTPublic{
		Type: tpm2.TPMAlgKeyedHash, NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, UserWithAuth: true},
		AuthPolicy:       tpm2.TPM2BDigest{Buffer: s.Policy},
	}))
	good, err := s.Marshal()
	require.NoError(t, err)
	_, err = Parse(good)
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		edit func(*Sealed)
		want string
	}{
		"no PCRs":        {func(s *Sealed) { s.PCRs = nil }, "pcrs: none named"},
		"short policy":   {func(s *Sealed) { s.Policy = s.Policy[:4] }, "policy: 4 bytes"},
		"other policy":   {func(s *Sealed) { s.Policy = bytes.Repeat([]byte{1}, 32) }, "its policy is not the one named"},
		"broken public":  {func(s *Sealed) { s.Public = s.Public[:5] }, "public:"},
		"password":       {func(s *Sealed) { s.Public = withPassword }, "opens with a password"},
		"broken private": {func(s *Sealed) { s.Private = []byte{0xff} }, "private:"},
	} {
		t.Run(name, func(t *testing.T) {
			c := *s
			tc.edit(&c)
			b, err := c.Marshal()
			require.NoError(t, err)
			_, err = Parse(b)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"pcrs":[7],"policy":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","public":"AAA=","private":"AAA="}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		// Whatever parses marshals and parses again the same.
		b2, err := s.Marshal()
		require.NoError(t, err)
		s2, err := Parse(b2)
		require.NoError(t, err)
		assert.Equal(t, s, s2)
	})
}
