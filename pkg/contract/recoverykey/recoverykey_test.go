package recoverykey

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeyRoundTrip(t *testing.T) {
	k, err := New(nil)
	require.NoError(t, err)
	s := k.String()
	assert.Regexp(t, `^([0-9a-f]{4}-){7}[0-9a-f]{4}$`, s)
	for _, typed := range []string{s, strings.ToUpper(s), strings.ReplaceAll(s, "-", ""), strings.ReplaceAll(s, "-", " ") + "\r\n"} {
		got, err := Parse(typed)
		require.NoError(t, err, typed)
		assert.Equal(t, k, got, typed)
	}
	assert.Len(t, k.Passphrase(), 32)
	other, err := New(nil)
	require.NoError(t, err)
	assert.NotEqual(t, k.Passphrase(), other.Passphrase())
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"", "1234", "zzzz-zzzz-zzzz-zzzz-zzzz-zzzz-zzzz-zzzz", "0123-4567-89ab-cdef-0123-4567-89ab-cdef-01"} {
		_, err := Parse(s)
		assert.ErrorIs(t, err, ErrKeySyntax, s)
	}
}

func TestEscrowRecovers(t *testing.T) {
	e, err := NewEscrow(nil)
	require.NoError(t, err)
	// Both halves survive their encodings.
	e2, err := ParseEscrow(e.String())
	require.NoError(t, err)
	pub, err := ParsePublicKey(e.Public().String())
	require.NoError(t, err)
	assert.Equal(t, e.Public().ID(), pub.ID())
	assert.Len(t, pub.ID(), 16)

	key, code, err := pub.Seal()
	require.NoError(t, err)
	parsed, err := ParseCode(code.String())
	require.NoError(t, err)
	got, err := e2.Recover(parsed)
	require.NoError(t, err)
	assert.Equal(t, key, got, "the operator derives the node's key from its code")

	// Each node's key is its own.
	key2, code2, err := pub.Seal()
	require.NoError(t, err)
	assert.NotEqual(t, key, key2)
	assert.NotEqual(t, code.String(), code2.String())

	// Another cluster's escrow derives another key.
	other, err := NewEscrow(nil)
	require.NoError(t, err)
	wrong, err := other.Recover(code)
	require.NoError(t, err)
	assert.NotEqual(t, key, wrong)
}

func TestParseCodeCatchesTypos(t *testing.T) {
	e, err := NewEscrow(nil)
	require.NoError(t, err)
	_, code, err := e.Public().Seal()
	require.NoError(t, err)
	s := code.String()
	assert.Regexp(t, `^([a-z2-7]{4}-)+[a-z2-7]{1,4}$`, s)
	// One character changed.
	typo := []byte(s)
	if typo[0] == 'a' {
		typo[0] = 'b'
	} else {
		typo[0] = 'a'
	}
	_, err = ParseCode(string(typo))
	assert.ErrorIs(t, err, ErrCodeSyntax)
	_, err = ParseCode("not-a-code-!")
	assert.ErrorIs(t, err, ErrCodeSyntax)
	_, err = ParseCode(strings.ToUpper(strings.ReplaceAll(s, "-", " ")))
	assert.NoError(t, err, "case and separators do not matter")
}

func TestParsePublicKeyRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "x25519:"},
		{"ed25519:AAAA", "x25519:"},
		{"x25519:!!", "base64"},
		{"x25519:AAAA", "X25519"},
	} {
		_, err := ParsePublicKey(tc.in)
		require.Error(t, err, tc.in)
		assert.Contains(t, err.Error(), tc.want, tc.in)
	}
}

func TestParseEscrowRefuses(t *testing.T) {
	_, err := ParseEscrow("")
	assert.ErrorContains(t, err, "PEM")
	_, err = ParseEscrow("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	assert.ErrorContains(t, err, "PKCS#8")
}

func FuzzParseCode(f *testing.F) {
	e, err := NewEscrow(nil)
	require.NoError(f, err)
	_, code, err := e.Public().Seal()
	require.NoError(f, err)
	f.Add(code.String())
	f.Add("")
	f.Add("aaaa-bbbb")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCode(s)
		if err != nil {
			return
		}
		again, err := ParseCode(c.String())
		require.NoError(t, err)
		assert.Equal(t, c, again)
	})
}

func FuzzParse(f *testing.F) {
	k, err := New(nil)
	require.NoError(f, err)
	f.Add(k.String())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(k.String())
		require.NoError(t, err)
		assert.Equal(t, k, again)
	})
}
