package secureboot

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	"github.com/terrarium-os/terrarium/pkg/contract/cms"
	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// Our signed updates are efitools' sign-efi-sig-list's, byte for byte
// (RSA PKCS#1 v1.5 is deterministic), for each role and its signer; and
// what it signs (-o) is our SignedPayload.
func TestSignVariableMatchesEfitools(t *testing.T) {
	ks := newTestKeySet(t)
	ts := NewEFITime(testTime())
	dir := t.TempDir()
	env := []string{"TZ=UTC"}
	for _, r := range Roles() {
		t.Run(string(r), func(t *testing.T) {
			signer := ks.Key(signerOf(r))
			esl, err := efisig.X509SignatureList(ks.Owner, ks.Key(r).Cert).MarshalBinary()
			require.NoError(t, err)
			eslFile := writeFile(t, dir, ESLFile(r), esl)

			payload := filepath.Join(dir, string(r)+".payload")
			runTool(t, env, "sign-efi-sig-list", "-o", "-t", ts.String(), string(r), eslFile, payload)
			want, err := os.ReadFile(payload)
			require.NoError(t, err)
			assert.Equal(t, want, SignedPayload(VariableOf(r), ts, esl), "the signed payload")

			theirs := filepath.Join(dir, string(r)+".efitools.auth")
			runTool(t, env, "sign-efi-sig-list", "-t", ts.String(), "-c", signer.CertFile, "-k", signer.KeyFile, string(r), eslFile, theirs)
			want, err = os.ReadFile(theirs)
			require.NoError(t, err)
			av, err := SignVariable(VariableOf(r), ts, esl, signer)
			require.NoError(t, err)
			ours, err := av.MarshalBinary()
			require.NoError(t, err)
			assert.Equal(t, want, ours, "the .auth file")
		})
	}
}

// contentInfo wraps a bare SignedData as PKCS#7 tools other than
// efitools write it.
func contentInfo(t *testing.T, sd []byte) []byte {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(cms.OIDSignedData())
		b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes(sd) })
	})
	out, err := b.Bytes()
	require.NoError(t, err)
	return out
}

func TestVerifyAuthenticatedVariable(t *testing.T) {
	ks := newTestKeySet(t)
	other := newTestKeySet(t)
	ts := NewEFITime(testTime())
	esl, err := efisig.X509SignatureList(ks.Owner, ks.DB.Cert).MarshalBinary()
	require.NoError(t, err)
	signed, err := SignVariable(VariableOf(DB), ts, esl, &ks.KEK)
	require.NoError(t, err)
	file, err := signed.MarshalBinary()
	require.NoError(t, err)
	parsed, err := ParseAuthenticatedVariable(file)
	require.NoError(t, err)
	assert.Equal(t, signed, parsed)
	assert.Equal(t, esl, parsed.Data)

	for _, tc := range []struct {
		name   string
		change func(a *AuthenticatedVariable)
		v      Variable
		by     *KeySet
		role   Role
		err    error
	}{
		{name: "as signed", v: VariableOf(DB), by: ks, role: KEK},
		{name: "inside a ContentInfo", change: func(a *AuthenticatedVariable) { a.SignedData = contentInfo(t, a.SignedData) }, v: VariableOf(DB), by: ks, role: KEK},
		{name: "another signer", v: VariableOf(DB), by: ks, role: PK, err: ErrBadSignature},
		{name: "another site's KEK", v: VariableOf(DB), by: other, role: KEK, err: ErrBadSignature},
		{name: "another variable", v: VariableOf(KEK), by: ks, role: KEK, err: ErrBadSignature},
		{name: "append instead of replace", v: Variable{Name: "db", Vendor: efisig.EFIImageSecurityDatabase(), Attributes: secureBootAttrs | AttrAppendWrite}, by: ks, role: KEK, err: ErrBadSignature},
		{name: "data changed", change: func(a *AuthenticatedVariable) { a.Data[len(a.Data)-1] ^= 1 }, v: VariableOf(DB), by: ks, role: KEK, err: ErrBadSignature},
		{name: "later timestamp", change: func(a *AuthenticatedVariable) { a.Timestamp.Second++ }, v: VariableOf(DB), by: ks, role: KEK, err: ErrBadSignature},
		{name: "signature garbled", change: func(a *AuthenticatedVariable) { a.SignedData[len(a.SignedData)-1] ^= 1 }, v: VariableOf(DB), by: ks, role: KEK, err: ErrBadSignature},
		{name: "signed data cut", change: func(a *AuthenticatedVariable) { a.SignedData = a.SignedData[:len(a.SignedData)-1] }, v: VariableOf(DB), by: ks, role: KEK, err: ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAuthenticatedVariable(file)
			require.NoError(t, err)
			if tc.change != nil {
				tc.change(a)
			}
			err = a.Verify(tc.v, tc.by.Key(tc.role).Cert)
			if tc.err == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tc.err)
		})
	}
}

func TestParseAuthenticatedVariableMalformed(t *testing.T) {
	ks := newTestKeySet(t)
	signed, err := SignVariable(VariableOf(PK), NewEFITime(testTime()), []byte("data"), &ks.PK)
	require.NoError(t, err)
	good, err := signed.MarshalBinary()
	require.NoError(t, err)
	set := func(off int, v ...byte) []byte {
		b := bytes.Clone(good)
		copy(b[off:], v)
		return b
	}
	length := func(v uint32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[16:], v)
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short header", good[:authHeaderSize-1]},
		{"nanoseconds", set(8, 1)},
		{"time zone", set(12, 1)},
		{"daylight", set(14, 1)},
		{"revision", set(20, 0x00, 0x01)},
		{"certificate type", set(22, 0xf0)},
		{"not PKCS#7", set(24, 0)},
		{"length past the end", length(uint32(len(good)))},
		{"length without a signature", length(winCertHeaderSize)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAuthenticatedVariable(tc.data)
			assert.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func TestEFITime(t *testing.T) {
	et := NewEFITime(testTime().Add(123456789)) // nanoseconds dropped
	assert.Equal(t, EFITime{Year: 2027, Month: 3, Day: 4, Hour: 5, Minute: 6, Second: 7}, et)
	assert.Equal(t, "2027-03-04 05:06:07", et.String())
	assert.Equal(t, []byte{0xeb, 0x07, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0}, et.append(nil))
}
