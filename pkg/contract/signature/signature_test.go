package signature

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedKey returns the deterministic key made from seed byte b.
func fixedKey(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

const config = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-1\n"

func TestSignFormat(t *testing.T) {
	key := fixedKey(1)
	sig := Sign(key, []byte(config))
	lines := strings.Split(string(sig), "\n")
	require.Len(t, lines, 4, "three lines and a final newline:\n%s", sig)
	assert.Equal(t, "terrarium-signature v1", lines[0])
	assert.Equal(t, "key "+PublicKeyOf(key).String(), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "sig "))
	assert.Empty(t, lines[3])
	assert.Less(t, len(sig), MaxFileSize)

	// Deterministic, and over the domain-separated message, not the data.
	assert.Equal(t, sig, Sign(key, []byte(config)))
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[2], "sig "))
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(config))
	msg := append([]byte("terrarium machine config signature v1\n"), sum[:]...)
	pub := key.Public().(ed25519.PublicKey)
	assert.True(t, ed25519.Verify(pub, msg, raw), "signature is not over the domain line and the SHA-256")
	assert.False(t, ed25519.Verify(pub, []byte(config), raw), "signature is over the bare data")
	assert.Equal(t, ed25519.Sign(key, msg), raw)
}

func TestVerify(t *testing.T) {
	signer, other, stranger := fixedKey(1), fixedKey(2), fixedKey(3)
	trusted := []PublicKey{PublicKeyOf(other), PublicKeyOf(signer)}
	good := Sign(signer, []byte(config))
	lines := strings.SplitAfter(string(good), "\n")
	otherSig := strings.SplitAfter(string(Sign(other, []byte(config))), "\n")[2]

	tests := []struct {
		name    string
		sig     []byte
		data    string
		trusted []PublicKey
		want    error  // nil: verifies, by signer
		msg     string // in the error
	}{
		{name: "good signature", sig: good, data: config, trusted: trusted},
		{name: "no final newline", sig: bytes.TrimSuffix(good, []byte("\n")), data: config, trusted: trusted},
		{name: "signer only", sig: good, data: config, trusted: []PublicKey{PublicKeyOf(signer)}},
		{name: "wrong key: key line names a trusted key that did not sign", data: config, trusted: trusted,
			sig: []byte(lines[0] + "key " + PublicKeyOf(other).String() + "\n" + lines[2]), want: ErrBadSignature},
		{name: "wrong key: another key's signature under the signer's name", data: config, trusted: trusted,
			sig: []byte(lines[0] + lines[1] + otherSig), want: ErrBadSignature},
		{name: "unknown key", sig: Sign(stranger, []byte(config)), data: config, trusted: trusted,
			want: ErrUnknownKey, msg: PublicKeyOf(stranger).ID()},
		{name: "no trusted keys", sig: good, data: config, want: ErrUnknownKey, msg: PublicKeyOf(signer).ID()},
		{name: "truncated file", sig: good[:len(good)/2], data: config, trusted: trusted, want: ErrMalformed},
		{name: "truncated to the header", sig: []byte(lines[0]), data: config, trusted: trusted, want: ErrMalformed, msg: "cut short"},
		{name: "truncated signature", sig: good[:len(good)-10], data: config, trusted: trusted, want: ErrMalformed},
		{name: "signature over another file", sig: Sign(signer, []byte(config+"# more\n")), data: config, trusted: trusted, want: ErrBadSignature},
		{name: "tampered data", sig: good, data: strings.Replace(config, "node-1", "node-2", 1), trusted: trusted, want: ErrBadSignature},
		{name: "tampered signature", sig: tamper(good, len(good)-5), data: config, trusted: trusted, want: ErrBadSignature},
		{name: "empty data signed", sig: Sign(signer, nil), data: "", trusted: trusted},
		{name: "empty file", sig: nil, data: config, trusted: trusted, want: ErrMalformed},
		{name: "garbage", sig: []byte("\x00\xff garbage \n\n\n"), data: config, trusted: trusted, want: ErrMalformed},
		{name: "wrong header", sig: []byte("terrarium-signature v2\n" + lines[1] + lines[2]), data: config, trusted: trusted, want: ErrMalformed, msg: "first line"},
		{name: "extra line", sig: append(bytes.Clone(good), "note\n"...), data: config, trusted: trusted, want: ErrMalformed},
		{name: "CRLF", sig: []byte(strings.ReplaceAll(string(good), "\n", "\r\n")), data: config, trusted: trusted, want: ErrMalformed},
		{name: "bad base64", sig: []byte(lines[0] + lines[1] + "sig !!!!\n"), data: config, trusted: trusted, want: ErrMalformed, msg: "base64"},
		{name: "short signature", sig: []byte(lines[0] + lines[1] + "sig " + base64.StdEncoding.EncodeToString(make([]byte, 63)) + "\n"),
			data: config, trusted: trusted, want: ErrMalformed, msg: "63 bytes"},
		{name: "short key", sig: []byte(lines[0] + "key ed25519:" + base64.StdEncoding.EncodeToString(make([]byte, 31)) + "\n" + lines[2]),
			data: config, trusted: trusted, want: ErrMalformed, msg: "31 bytes"},
		{name: "ssh key", sig: []byte(lines[0] + "key ssh-ed25519 AAAA\n" + lines[2]), data: config, trusted: trusted, want: ErrMalformed},
		{name: "too large", sig: append(bytes.Clone(good), bytes.Repeat([]byte("#"), MaxFileSize)...), data: config, trusted: trusted,
			want: ErrMalformed, msg: "more than the 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Verify(tt.sig, []byte(tt.data), tt.trusted)
			if tt.want == nil {
				require.NoError(t, err)
				assert.Equal(t, PublicKeyOf(signer), got)
				return
			}
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, PublicKey{}, got, "a failed Verify returns no key")
			for _, other := range []error{ErrMalformed, ErrUnknownKey, ErrBadSignature} {
				if !errors.Is(other, tt.want) {
					assert.NotErrorIs(t, err, other)
				}
			}
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), "imagebuild config sign", "the error says how to fix it")
		})
	}
}

// tamper flips a bit of b at i, keeping it base64.
func tamper(b []byte, i int) []byte {
	out := bytes.Clone(b)
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

func TestPublicKeyText(t *testing.T) {
	pub := PublicKeyOf(fixedKey(7))
	s := pub.String()
	require.True(t, strings.HasPrefix(s, "ed25519:"))
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "ed25519:"))
	require.NoError(t, err)
	assert.Equal(t, []byte(fixedKey(7).Public().(ed25519.PublicKey)), raw)

	parsed, err := ParsePublicKey(s)
	require.NoError(t, err)
	assert.Equal(t, pub, parsed)

	sum := sha256.Sum256(raw)
	assert.Len(t, pub.ID(), 16)
	assert.Equal(t, base16(sum[:8]), pub.ID())
	assert.NotEqual(t, pub.ID(), PublicKeyOf(fixedKey(8)).ID())
}

func base16(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&15])
	}
	return sb.String()
}

func TestParsePublicKeyErrors(t *testing.T) {
	good := PublicKeyOf(fixedKey(7)).String()
	tests := []struct{ name, in, msg string }{
		{"empty", "", "empty key"},
		{"blank", "  ", "empty key"},
		{"ssh key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy", "SSH key"},
		{"private key", "-----BEGIN PRIVATE KEY-----", "keep the private key secret"},
		{"no prefix", strings.TrimPrefix(good, "ed25519:"), "not a config signing key"},
		{"other algorithm", "rsa:" + strings.TrimPrefix(good, "ed25519:"), "not a config signing key"},
		{"bad base64", "ed25519:not*base64", "not valid base64"},
		{"trailing space", good + " ", "not valid base64"},
		{"wrapped", good[:20] + "\n" + good[20:], "not valid base64"},
		{"unpadded", strings.TrimRight(good, "="), "not valid base64"},
		{"short", "ed25519:" + base64.StdEncoding.EncodeToString(make([]byte, 16)), "holds 16 bytes"},
		{"zero", "ed25519:" + base64.StdEncoding.EncodeToString(make([]byte, 32)), "all zeros"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParsePublicKey(tt.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), "ed25519:<base64", "the error shows the right form")
			assert.Equal(t, PublicKey{}, k)
		})
	}
}

func TestPrivateKeyRoundTrip(t *testing.T) {
	priv, pub, err := GenerateKey()
	require.NoError(t, err)
	assert.Equal(t, PublicKeyOf(priv), pub)
	other, _, err := GenerateKey()
	require.NoError(t, err)
	assert.NotEqual(t, priv, other)

	pemBytes, err := MarshalPrivateKey(priv)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(pemBytes, []byte("-----BEGIN PRIVATE KEY-----\n")), "%s", pemBytes)
	parsed, err := ParsePrivateKey(pemBytes)
	require.NoError(t, err)
	assert.Equal(t, priv, parsed)

	path := filepath.Join(t.TempDir(), "node.key")
	require.NoError(t, os.WriteFile(path, pemBytes, 0o600))
	loaded, err := LoadPrivateKey(path)
	require.NoError(t, err)
	assert.Equal(t, priv, loaded)

	_, err = MarshalPrivateKey(priv[:10])
	assert.Error(t, err)
}

func TestParsePrivateKeyErrors(t *testing.T) {
	priv := fixedKey(9)
	good, err := MarshalPrivateKey(priv)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ecDER, err := x509.MarshalPKCS8PrivateKey(ecKey)
	require.NoError(t, err)
	ecPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}))
	tests := []struct{ name, in, msg string }{
		{"empty", "", "empty file"},
		{"public key", PublicKeyOf(priv).String() + "\n", "public key"},
		{"not PEM", "hello", "not PEM"},
		{"truncated", string(good[:len(good)/2]), "not valid PEM"},
		{"wrong type", strings.ReplaceAll(string(good), "PRIVATE KEY", "EC PRIVATE KEY"), `"EC PRIVATE KEY"`},
		{"two blocks", string(good) + string(good), "more than one"},
		{"not PKCS#8", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "PKCS#8"},
		{"ECDSA", ecPEM, "an ECDSA key, not ed25519"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePrivateKey([]byte(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), "imagebuild config keygen")
		})
	}
}

func TestLoadPrivateKeyNamesFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.key")
	_, err := LoadPrivateKey(missing)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), missing)

	bad := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("nonsense"), 0o600))
	_, err = LoadPrivateKey(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
}

func TestSignPanicsOnBadKey(t *testing.T) {
	assert.Panics(t, func() { Sign(ed25519.PrivateKey("short"), nil) })
}

func TestErrorsSayWhatToDo(t *testing.T) {
	for _, err := range []error{ErrMalformed, ErrUnknownKey, ErrBadSignature} {
		assert.True(t, strings.Contains(err.Error(), "sign") && strings.Contains(err.Error(), ";"), "%q", err)
		assert.False(t, errors.Is(err, nil))
	}
}

func FuzzVerify(f *testing.F) {
	signer := fixedKey(1)
	trusted := []PublicKey{PublicKeyOf(signer)}
	f.Add(Sign(signer, []byte(config)), []byte(config))
	f.Add(Sign(fixedKey(2), []byte(config)), []byte(config))
	f.Add([]byte("terrarium-signature v1\nkey ed25519:\nsig \n"), []byte(""))
	f.Fuzz(func(t *testing.T, sig, data []byte) {
		key, err := Verify(sig, data, trusted)
		if err != nil {
			if key != (PublicKey{}) {
				t.Fatalf("Verify failed (%v) but returned a key", err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("Verify error %v is none of the sentinels", err)
			}
			return
		}
		if key != trusted[0] {
			t.Fatalf("Verify succeeded with key %s, not the trusted one", key)
		}
		// Anything that verifies is what Sign writes for data (ed25519
		// signatures are deterministic), give or take the final newline.
		if want := Sign(signer, data); !bytes.Equal(bytes.TrimSuffix(want, []byte("\n")), bytes.TrimSuffix(sig, []byte("\n"))) {
			t.Fatalf("Verify accepted %q, which Sign does not write", sig)
		}
	})
}

// A signature made for one purpose never verifies for another: a signed
// config is no signed bundle index nor upgrade instruction, and the other
// way round.
func TestPurposesApart(t *testing.T) {
	key := fixedKey(1)
	trusted := []PublicKey{PublicKeyOf(key)}
	data := []byte(`{"schemaVersion":2,"manifests":[]}`)
	for _, tc := range []struct{ signed, verified Purpose }{
		{PurposeConfig, PurposeBundle},
		{PurposeBundle, PurposeConfig},
		{PurposeConfig, PurposeUpgradeInstruction},
		{PurposeUpgradeInstruction, PurposeConfig},
		{PurposeBundle, PurposeUpgradeInstruction},
		{PurposeUpgradeInstruction, PurposeBundle},
	} {
		sig := SignFor(tc.signed, key, data)
		_, err := VerifyFor(tc.signed, sig, data, trusted)
		require.NoError(t, err)
		_, err = VerifyFor(tc.verified, sig, data, trusted)
		assert.ErrorIs(t, err, ErrBadSignature, "signed for %q, verified for %q", tc.signed, tc.verified)
	}
	assert.Equal(t, Sign(key, data), SignFor(PurposeConfig, key, data), "Sign is for configs")
}
