package upgrade_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

var (
	instrDigest  = "sha256:" + strings.Repeat("ab", 32)
	instrExpires = time.Date(2026, 12, 9, 10, 0, 0, 0, time.UTC)
)

// sampleInstruction forces 0.2.0 of instrDigest until instrExpires.
func sampleInstruction() upgrade.Instruction {
	return upgrade.Instruction{Action: upgrade.ActionForce, Digest: instrDigest, Version: "0.2.0", Expires: instrExpires}
}

// The file is the four lines of the instruction and its signature, and
// reads back to what was signed, by the key that signed it.
func TestInstructionSignsAndVerifies(t *testing.T) {
	key := fixedKey(1)
	file, err := upgrade.SignInstruction(key, sampleInstruction())
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(file), "\n"), "\n")
	require.Len(t, lines, 7)
	assert.Equal(t, []string{
		"terrarium upgrade instruction v1",
		"force " + instrDigest,
		"version 0.2.0",
		"expires 2026-12-09T10:00:00Z",
		"terrarium-signature v1",
	}, lines[:5])

	in, signer, err := upgrade.VerifyInstruction(file, []signature.PublicKey{signature.PublicKeyOf(fixedKey(2)), signature.PublicKeyOf(key)})
	require.NoError(t, err)
	assert.Equal(t, sampleInstruction(), in)
	assert.Equal(t, signature.PublicKeyOf(key), signer)
	parsed, err := upgrade.ParseInstruction(bytes.TrimSuffix(file, []byte("\n")))
	require.NoError(t, err, "the last newline may be missing")
	assert.Equal(t, in, parsed)
	assert.Equal(t, "force 0.2.0 ("+instrDigest+") until 2026-12-09T10:00:00Z", in.String())
}

func TestSignInstructionRefusesAnInvalidOne(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*upgrade.Instruction)
		want   string
	}{
		{"no action", func(in *upgrade.Instruction) { in.Action = "" }, `action "": the only action is "force"`},
		{"another action", func(in *upgrade.Instruction) { in.Action = "clear" }, `action "clear"`},
		{"a short digest", func(in *upgrade.Instruction) { in.Digest = "sha256:ab" }, "is not sha256:<64 hex digits>"},
		{"an upper-case digest", func(in *upgrade.Instruction) { in.Digest = strings.ToUpper(instrDigest) }, "is not sha256:<64 hex digits>"},
		{"a version with a space", func(in *upgrade.Instruction) { in.Version = "0.2.0 now" }, "is not a version"},
		{"a version with a newline", func(in *upgrade.Instruction) { in.Version = "0.2.0\nforce" }, "is not a version"},
		{"no expiry", func(in *upgrade.Instruction) { in.Expires = time.Time{} }, "the expiry must be a time in whole seconds"},
		{"a fraction of a second", func(in *upgrade.Instruction) { in.Expires = instrExpires.Add(time.Millisecond) }, "whole seconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleInstruction()
			tt.change(&in)
			_, err := upgrade.SignInstruction(fixedKey(1), in)
			assert.ErrorIs(t, err, upgrade.ErrInstructionMalformed)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// Anything but the file as signed, by a trusted key, is refused: a
// changed line, another key, a signature made for another purpose, a
// file cut short or added to.
func TestVerifyInstructionRefuses(t *testing.T) {
	key := fixedKey(1)
	trusted := []signature.PublicKey{signature.PublicKeyOf(key)}
	good, err := upgrade.SignInstruction(key, sampleInstruction())
	require.NoError(t, err)
	body := good[:bytes.Index(good, []byte("terrarium-signature"))]
	other := strings.Repeat("cd", 32)
	for _, tt := range []struct {
		name string
		file []byte
		want error
		text string
	}{
		{"another digest", bytes.Replace(good, []byte(strings.Repeat("ab", 32)), []byte(other), 1), signature.ErrBadSignature, ""},
		{"another version", bytes.Replace(good, []byte("version 0.2.0"), []byte("version 0.1.0"), 1), signature.ErrBadSignature, ""},
		{"a later expiry", bytes.Replace(good, []byte("2026-12-09"), []byte("2036-12-09"), 1), signature.ErrBadSignature, ""},
		{"an untrusted key", mustSign(t, fixedKey(2), sampleInstruction()), signature.ErrUnknownKey, "signed by key"},
		{"a config signature of its lines", append(bytes.Clone(body), signature.Sign(key, body)...), signature.ErrBadSignature, ""},
		{"a bundle signature of its lines", append(bytes.Clone(body), signature.SignFor(signature.PurposeBundle, key, body)...), signature.ErrBadSignature, ""},
		{"no signature", body, upgrade.ErrInstructionMalformed, "4 lines instead of 7"},
		{"a line added", append(bytes.Clone(good), "note hello\n"...), upgrade.ErrInstructionMalformed, "8 lines instead of 7"},
		{"empty", nil, upgrade.ErrInstructionMalformed, "1 lines instead of 7"},
		{"another header", bytes.Replace(good, []byte("instruction v1"), []byte("instruction v2"), 1), upgrade.ErrInstructionMalformed, "the first line is"},
		{"a signature cut short", good[:len(good)-20], upgrade.ErrInstructionMalformed, "its signature"},
		{"spaces doubled", bytes.Replace(good, []byte("version 0.2.0"), []byte("version  0.2.0"), 1), upgrade.ErrInstructionMalformed, "is not a version"},
		{"too big", append(bytes.Clone(good), bytes.Repeat([]byte("x"), upgrade.MaxInstructionSize)...), upgrade.ErrInstructionMalformed, "more than the 4096"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := upgrade.VerifyInstruction(tt.file, trusted)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorContains(t, err, tt.text)
		})
	}
}

func mustSign(t *testing.T, key []byte, in upgrade.Instruction) []byte {
	t.Helper()
	b, err := upgrade.SignInstruction(key, in)
	require.NoError(t, err)
	return b
}

func TestInstructionCheck(t *testing.T) {
	in := sampleInstruction()
	for _, tt := range []struct {
		name            string
		digest, version string
		now             time.Time
		want            error
		text            string
	}{
		{"its upgrade, in time", instrDigest, "0.2.0", instrExpires.Add(-time.Hour), nil, ""},
		{"another digest", "sha256:" + strings.Repeat("cd", 32), "0.2.0", instrExpires.Add(-time.Hour), upgrade.ErrInstructionOther, "it forces 0.2.0 (" + instrDigest + "), not 0.2.0 (sha256:cdcd"},
		{"another version", instrDigest, "0.2.1", instrExpires.Add(-time.Hour), upgrade.ErrInstructionOther, "not 0.2.1"},
		{"at its expiry", instrDigest, "0.2.0", instrExpires, upgrade.ErrInstructionExpired, "valid until 2026-12-09T10:00:00Z, and this node's clock reads 2026-12-09T10:00:00Z"},
		{"a day late", instrDigest, "0.2.0", instrExpires.Add(24 * time.Hour), upgrade.ErrInstructionExpired, "clock reads 2026-12-10T10:00:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := in.Check(tt.digest, tt.version, tt.now)
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorContains(t, err, tt.text)
		})
	}
}

// The manifest and its signature, as the file holds them, verify on their
// own (what a rollout's record carries), and their digest is the one the
// nodes record.
func TestVerifyManifest(t *testing.T) {
	key := fixedKey(1)
	f, err := open(build(t, key))
	require.NoError(t, err)
	manifest, sig := f.SignedManifest()
	trusted := []signature.PublicKey{signature.PublicKeyOf(key)}

	m, signer, err := upgrade.VerifyManifest("the rollout", manifest, sig, trusted)
	require.NoError(t, err)
	assert.Equal(t, "0.2.0", m.Version)
	assert.Equal(t, signature.PublicKeyOf(key), signer)
	canonical, err := m.Marshal()
	require.NoError(t, err)
	assert.Equal(t, upgrade.Digest(canonical), upgrade.Digest(manifest))
	assert.True(t, strings.HasPrefix(upgrade.Digest(manifest), "sha256:"))

	for _, tt := range []struct {
		name          string
		manifest, sig []byte
		trusted       []signature.PublicKey
		want          error
	}{
		{"a changed version", bytes.Replace(manifest, []byte(`"0.2.0"`), []byte(`"0.2.9"`), 1), sig, trusted, upgrade.ErrBadSignature},
		{"an untrusted key", manifest, sig, []signature.PublicKey{signature.PublicKeyOf(fixedKey(2))}, upgrade.ErrUnknownKey},
		{"no signature", manifest, nil, trusted, upgrade.ErrMalformed},
		{"a config signature of the bare manifest", manifest, signature.Sign(key, manifest), trusted, upgrade.ErrBadSignature},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := upgrade.VerifyManifest("the rollout", tt.manifest, tt.sig, tt.trusted)
			assert.ErrorIs(t, err, tt.want)
			var e *upgrade.Error
			require.True(t, errors.As(err, &e))
			assert.Equal(t, "the rollout", e.File)
		})
	}
}

// FuzzParseInstruction feeds instruction files (what a stick, a
// `firstboot upgrade` directory or the cluster's record may carry) to
// ParseInstruction and VerifyInstruction: they never panic, refuse with
// the named errors, and an instruction they read is exactly the file
// SignInstruction writes of it.
func FuzzParseInstruction(f *testing.F) {
	key := fixedKey(1)
	good, err := upgrade.SignInstruction(key, sampleInstruction())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(bytes.TrimSuffix(good, []byte("\n")))
	f.Add(good[:len(good)/2])
	f.Add(bytes.Replace(good, []byte("force"), []byte("clear"), 1))
	f.Add([]byte("terrarium upgrade instruction v1\nforce x\nversion y\nexpires z\n"))
	f.Add([]byte{})
	trusted := []signature.PublicKey{signature.PublicKeyOf(key)}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := upgrade.ParseInstruction(data)
		if err != nil {
			if !errors.Is(err, upgrade.ErrInstructionMalformed) {
				t.Fatalf("ParseInstruction: %v is not ErrInstructionMalformed", err)
			}
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("ParseInstruction read an invalid instruction: %v", err)
		}
		again, err := upgrade.SignInstruction(key, in)
		if err != nil {
			t.Fatalf("a read instruction does not sign: %v", err)
		}
		body := again[:bytes.Index(again, []byte("terrarium-signature"))]
		if !bytes.HasPrefix(data, body) {
			t.Fatalf("ParseInstruction read %q from a file that does not start with its lines", body)
		}
		v, signer, err := upgrade.VerifyInstruction(data, trusted)
		switch {
		case err == nil:
			if v != in || signer != trusted[0] {
				t.Fatalf("VerifyInstruction read %v by %v; ParseInstruction read %v", v, signer, in)
			}
		case !errors.Is(err, upgrade.ErrInstructionMalformed) && !errors.Is(err, signature.ErrBadSignature) && !errors.Is(err, signature.ErrUnknownKey):
			t.Fatalf("VerifyInstruction: %v is none of the named errors", err)
		}
	})
}
