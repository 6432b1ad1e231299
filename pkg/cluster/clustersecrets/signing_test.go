package clustersecrets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

func TestGenerateMakesSigningKey(t *testing.T) {
	s := sharedSecrets(t)
	priv, err := s.SigningPrivateKey()
	require.NoError(t, err)
	pub, err := s.SigningPublicKey()
	require.NoError(t, err)
	assert.Equal(t, signature.PublicKeyOf(priv), pub)

	data := []byte("hostname: n\n")
	got, err := signature.Verify(signature.Sign(priv, data), data, []signature.PublicKey{pub})
	require.NoError(t, err)
	assert.Equal(t, pub, got)

	added, err := s.EnsureSigningKey(nil)
	require.NoError(t, err)
	assert.False(t, added, "a key that exists is kept")
	again, err := s.SigningPublicKey()
	require.NoError(t, err)
	assert.Equal(t, pub, again)

	other, err := Generate("other", testNow, time.Hour, nil)
	require.NoError(t, err)
	otherPub, err := other.SigningPublicKey()
	require.NoError(t, err)
	assert.NotEqual(t, pub, otherPub, "two clusters share a signing key")
}

func TestGenerateSigningKeyDeterministic(t *testing.T) {
	var keys []string
	for range 2 {
		cryptotest.SetGlobalRandom(t, 1)
		s, err := Generate("det", testNow, time.Hour, seeded(5))
		require.NoError(t, err)
		keys = append(keys, s.SigningKey)
	}
	assert.Equal(t, keys[0], keys[1])
}

// An older secrets file, without signingKey, loads; EnsureSigningKey adds
// a key and Save keeps it.
func TestOldFileWithoutSigningKey(t *testing.T) {
	s := sharedSecrets(t)
	s.SigningKey = ""
	data, err := encode(&s)
	require.NoError(t, err, "secrets without a signing key still save")
	require.NotContains(t, string(data), "signingKey")
	path := writeText(t, string(data))

	old, err := Load(path)
	require.NoError(t, err)
	assert.Empty(t, old.SigningKey)
	_, err = old.SigningPublicKey()
	require.ErrorIs(t, err, ErrNoSigningKey)
	assert.Contains(t, err.Error(), "imagebuild config cluster")

	added, err := old.EnsureSigningKey(nil)
	require.NoError(t, err)
	assert.True(t, added)
	pub, err := old.SigningPublicKey()
	require.NoError(t, err)
	require.NoError(t, Save(path, old))

	loaded, err := Load(path)
	require.NoError(t, err)
	again, err := loaded.SigningPublicKey()
	require.NoError(t, err)
	assert.Equal(t, pub, again, "the added key was not saved")
	assert.Equal(t, s.CA, loaded.CA, "adding the key changed the CA")
	assert.Equal(t, s.BootstrapToken, loaded.BootstrapToken)
}

func TestBadSigningKey(t *testing.T) {
	good := sharedSecrets(t)
	for name, key := range map[string]string{
		"not PEM":   "hello",
		"truncated": good.SigningKey[:len(good.SigningKey)/2],
		"CA key":    good.CA.Key,
		"public":    "ed25519:Zr5+Myx6RTMyvZ0Kf32wVfXF7xoGraZtmLOftoEMRzo=",
	} {
		t.Run(name, func(t *testing.T) {
			s := good
			s.SigningKey = key
			lines := problemLines(t, s.Validate())
			require.Len(t, lines, 1)
			assert.True(t, strings.HasPrefix(lines[0], "$.signingKey: "), lines[0])

			_, err := Load(writeRaw(t, &s))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "$.signingKey: ")

			path := filepath.Join(t.TempDir(), "cluster.yaml")
			require.Error(t, Save(path, &s))
			assert.NoFileExists(t, path)

			_, err = s.SigningPrivateKey()
			assert.Error(t, err)
		})
	}
}

func TestSavedSigningKeyIsPKCS8PEM(t *testing.T) {
	s := sharedSecrets(t)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, Save(path, &s))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Contains(data, []byte("\nsigningKey: |\n  -----BEGIN PRIVATE KEY-----\n")), "%s", data)
	_, err = signature.ParsePrivateKey([]byte(s.SigningKey))
	require.NoError(t, err)
}
