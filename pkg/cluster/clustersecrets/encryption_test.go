package clustersecrets

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerateMakesSecretsEncryptionKey(t *testing.T) {
	s := sharedSecrets(t)
	key, err := base64.StdEncoding.DecodeString(s.SecretsEncryptionKey)
	require.NoError(t, err)
	assert.Len(t, key, 32)

	added, err := s.EnsureSecretsEncryptionKey(nil)
	require.NoError(t, err)
	assert.False(t, added, "a key that exists is kept")

	other, err := Generate("other", testNow, time.Hour, nil)
	require.NoError(t, err)
	assert.NotEqual(t, s.SecretsEncryptionKey, other.SecretsEncryptionKey, "two clusters share a secrets encryption key")

	var keys []string
	for range 2 {
		cryptotest.SetGlobalRandom(t, 1)
		d, err := Generate("det", testNow, time.Hour, seeded(7))
		require.NoError(t, err)
		keys = append(keys, d.SecretsEncryptionKey)
	}
	assert.Equal(t, keys[0], keys[1], "the same seed gave another key")
}

// An older secrets file, without secretsEncryptionKey, loads;
// EnsureSecretsEncryptionKey adds a key, Save keeps it, and nothing else
// changes.
func TestOldFileWithoutSecretsEncryptionKey(t *testing.T) {
	s := sharedSecrets(t)
	s.SecretsEncryptionKey = ""
	data, err := encode(&s)
	require.NoError(t, err, "secrets without an encryption key still save")
	require.NotContains(t, string(data), "secretsEncryptionKey")
	path := writeText(t, string(data))

	old, err := Load(path)
	require.NoError(t, err)
	assert.Empty(t, old.SecretsEncryptionKey)
	added, err := old.EnsureSecretsEncryptionKey(nil)
	require.NoError(t, err)
	assert.True(t, added)
	require.NoError(t, Save(path, old))

	loaded, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, old.SecretsEncryptionKey, loaded.SecretsEncryptionKey, "the added key was not saved")
	assert.Equal(t, s.CA, loaded.CA)
	assert.Equal(t, s.SigningKey, loaded.SigningKey)
}

func TestBadSecretsEncryptionKey(t *testing.T) {
	good := sharedSecrets(t)
	for name, tc := range map[string]struct{ key, want string }{
		"not base64":  {"not base64 at all!", "is not standard base64 (want 32 random bytes)"},
		"16 bytes":    {base64.StdEncoding.EncodeToString(make([]byte, 16)), "decodes to 16 bytes; want 32"},
		"unpadded 32": {base64.RawStdEncoding.EncodeToString(make([]byte, 32)), "is not standard base64 (want 32 random bytes)"},
	} {
		t.Run(name, func(t *testing.T) {
			s := good
			s.SecretsEncryptionKey = tc.key
			lines := problemLines(t, s.Validate())
			require.Len(t, lines, 1)
			assert.Equal(t, "$.secretsEncryptionKey: "+tc.want, strings.TrimSpace(lines[0]))
			assert.NotContains(t, lines[0], tc.key, "the problem quotes the key")

			_, err := Load(writeRaw(t, &s))
			require.ErrorContains(t, err, "$.secretsEncryptionKey: ")
			path := filepath.Join(t.TempDir(), "cluster.yaml")
			require.Error(t, Save(path, &s))
			assert.NoFileExists(t, path)
		})
	}
}

// A rotation makes a new key, keeps the old ones newest first, and raises
// the configs' generation; the file saves and loads with them.
func TestRotateSecretsEncryptionKey(t *testing.T) {
	s := sharedSecrets(t)
	first := s.SecretsEncryptionKey
	assert.EqualValues(t, 1, s.Generation())

	require.NoError(t, s.RotateSecretsEncryptionKey(nil))
	second := s.SecretsEncryptionKey
	assert.NotEqual(t, first, second)
	assert.Equal(t, []string{first}, s.RetiredSecretsEncryptionKeys)
	assert.EqualValues(t, 2, s.Generation())

	require.NoError(t, s.RotateSecretsEncryptionKey(nil))
	assert.Equal(t, []string{second, first}, s.RetiredSecretsEncryptionKeys, "newest first")
	assert.EqualValues(t, 3, s.Generation())

	path := filepath.Join(t.TempDir(), "secrets.yaml")
	require.NoError(t, Save(path, &s))
	loaded, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, s.RetiredSecretsEncryptionKeys, loaded.RetiredSecretsEncryptionKeys)
	assert.EqualValues(t, 3, loaded.Generation())

	// A failed draw changes nothing.
	before := loaded.SecretsEncryptionKey
	require.Error(t, loaded.RotateSecretsEncryptionKey(strings.NewReader("short")))
	assert.Equal(t, before, loaded.SecretsEncryptionKey)
	assert.EqualValues(t, 3, loaded.Generation())
}

// A secrets file listing a retired key twice, or a bad one, is refused
// with the field named and no key quoted.
func TestRetiredKeysChecked(t *testing.T) {
	s := sharedSecrets(t)
	s.RetiredSecretsEncryptionKeys = []string{s.SecretsEncryptionKey, "bm90IDMyIGJ5dGVz"}
	err := s.Validate()
	require.Error(t, err)
	assert.ErrorContains(t, err, "retiredSecretsEncryptionKeys[0]: is the current key or an earlier entry again")
	assert.ErrorContains(t, err, "retiredSecretsEncryptionKeys[1]: decodes to 12 bytes; want 32")
	assert.NotContains(t, err.Error(), s.SecretsEncryptionKey)
}
