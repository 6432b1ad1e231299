package clustersecrets

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerateMakesRecoveryKey(t *testing.T) {
	s := sharedSecrets(t)
	e, err := s.RecoveryEscrow()
	require.NoError(t, err)
	key, code, err := e.Public().Seal()
	require.NoError(t, err)
	got, err := e.Recover(code)
	require.NoError(t, err)
	assert.Equal(t, key, got)

	added, err := s.EnsureRecoveryKey(nil)
	require.NoError(t, err)
	assert.False(t, added, "a key that exists is kept")
}

// An older secrets file, without recoveryKey, loads, says what to do when
// asked for the key, and gets one from EnsureRecoveryKey.
func TestOldFileWithoutRecoveryKey(t *testing.T) {
	s := sharedSecrets(t)
	s.RecoveryKey = ""
	old, err := Load(writeRaw(t, &s))
	require.NoError(t, err)
	_, err = old.RecoveryEscrow()
	require.ErrorContains(t, err, "run imagebuild config cluster with them once")
	added, err := old.EnsureRecoveryKey(nil)
	require.NoError(t, err)
	assert.True(t, added)
	_, err = old.RecoveryEscrow()
	require.NoError(t, err)
}

func TestBadRecoveryKey(t *testing.T) {
	s := sharedSecrets(t)
	s.RecoveryKey = s.SigningKey // an ed25519 key, not X25519
	lines := problemLines(t, s.Validate())
	require.Len(t, lines, 1)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(lines[0]), "$.recoveryKey: "), lines[0])
	assert.Contains(t, lines[0], "want an X25519 key")
}
