package clusterconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// parsed is node's config as Write wrote it into dir.
func parsed(t *testing.T, dir, node string) *machineconfig.Config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, node+".yaml"))
	require.NoError(t, err)
	c, err := machineconfig.Parse(node, data)
	require.NoError(t, err)
	return c
}

// The control planes carry the secrets encryption key of the cluster's
// secrets and the Pod Security levels; the worker neither.
func TestSecretsEncryptionKeyAndPodSecurityPerRole(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	topo := topology()
	topo.PodSecurity = &machineconfig.PodSecurity{Enforce: machineconfig.PodSecurityRestricted}
	_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: secretsPath, OutDir: dir, TokenTTL: time.Hour, Now: now})
	require.NoError(t, err)
	s, err := clustersecrets.Load(secretsPath)
	require.NoError(t, err)
	require.NotEmpty(t, s.SecretsEncryptionKey)
	for _, n := range []string{"cp-1", "cp-2"} {
		cl := parsed(t, dir, n).Cluster
		assert.Equal(t, s.SecretsEncryptionKey, cl.SecretsEncryptionKey, n)
		assert.Equal(t, machineconfig.PodSecurity{Enforce: "restricted", Audit: "restricted", Warn: "restricted"}, cl.PodSecurityLevels(), n)
	}
	w := parsed(t, dir, "w-1").Cluster
	assert.Empty(t, w.SecretsEncryptionKey, "a worker holds the key")
	assert.Nil(t, w.PodSecurity)
	data, err := os.ReadFile(filepath.Join(dir, "w-1.yaml"))
	require.NoError(t, err)
	assert.NotContains(t, string(data), s.SecretsEncryptionKey)
}

// Secrets saved before the secrets encryption key existed get one on the
// next run, saved and used from then on; nothing else changes.
func TestOldSecretsGetSecretsEncryptionKey(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	s, err := clustersecrets.Generate("lab", now, 24*time.Hour, nil)
	require.NoError(t, err)
	s.SecretsEncryptionKey = ""
	require.NoError(t, clustersecrets.Save(secretsPath, s))

	w := writeAll(t, filepath.Join(dir, "a"), secretsPath, false)
	assert.True(t, w.SecretsEncryptionKeyAdded)
	assert.False(t, w.SigningKeyAdded)
	loaded, err := clustersecrets.Load(secretsPath)
	require.NoError(t, err)
	require.NotEmpty(t, loaded.SecretsEncryptionKey, "the added key was not saved")
	assert.Equal(t, loaded.SecretsEncryptionKey, parsed(t, filepath.Join(dir, "a"), "cp-1").Cluster.SecretsEncryptionKey)
	assert.Equal(t, s.SigningKey, loaded.SigningKey)

	again := writeAll(t, filepath.Join(dir, "b"), secretsPath, false)
	assert.False(t, again.SecretsEncryptionKeyAdded)
	assert.Equal(t, loaded.SecretsEncryptionKey, parsed(t, filepath.Join(dir, "b"), "cp-2").Cluster.SecretsEncryptionKey)
}

// --rotate-secrets-key: the control planes' configs carry the new key
// and the old one retired, at the next generation, signed; a rerun keeps
// both and the generation; the worker holds neither key.
func TestRotateSecretsEncryptionKey(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	first := writeAll(t, filepath.Join(dir, "a"), secretsPath, false)
	assert.EqualValues(t, 1, first.Generation)
	old := parsed(t, filepath.Join(dir, "a"), "cp-1").Cluster.SecretsEncryptionKey
	require.NotEmpty(t, old)

	w, err := Write(WriteOptions{Topology: topology(), ClusterName: "lab", SecretsPath: secretsPath, OutDir: filepath.Join(dir, "b"),
		TokenTTL: 24 * time.Hour, Now: now, RotateSecretsEncryptionKey: true})
	require.NoError(t, err)
	assert.True(t, w.SecretsEncryptionKeyRotated)
	assert.EqualValues(t, 2, w.Generation)
	for _, n := range []string{"cp-1", "cp-2"} {
		c := parsed(t, filepath.Join(dir, "b"), n)
		assert.EqualValues(t, 2, c.Generation, n)
		assert.NotEqual(t, old, c.Cluster.SecretsEncryptionKey, n)
		assert.Equal(t, []string{old}, c.Cluster.RetiredSecretsEncryptionKeys, n)
	}
	worker := parsed(t, filepath.Join(dir, "b"), "w-1")
	assert.EqualValues(t, 2, worker.Generation, "every node's config is of the same generation")
	assert.Empty(t, worker.Cluster.RetiredSecretsEncryptionKeys)
	data, err := os.ReadFile(filepath.Join(dir, "b", "w-1.yaml"))
	require.NoError(t, err)
	assert.NotContains(t, string(data), old)

	again := writeAll(t, filepath.Join(dir, "c"), secretsPath, false)
	assert.False(t, again.SecretsEncryptionKeyRotated)
	assert.EqualValues(t, 2, again.Generation, "a rerun keeps the generation")
	assert.Equal(t, []string{old}, parsed(t, filepath.Join(dir, "c"), "cp-2").Cluster.RetiredSecretsEncryptionKeys)
}

// Every node, worker or control plane, carries the public half of the
// cluster's recovery escrow key, and nothing of its private half.
func TestRecoveryKeyOnEveryNode(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	_, err := Write(WriteOptions{Topology: topology(), ClusterName: "lab", SecretsPath: secretsPath, OutDir: dir, TokenTTL: time.Hour, Now: now})
	require.NoError(t, err)
	s, err := clustersecrets.Load(secretsPath)
	require.NoError(t, err)
	e, err := s.RecoveryEscrow()
	require.NoError(t, err)
	for _, n := range []string{"cp-1", "cp-2", "w-1"} {
		assert.Equal(t, e.Public().String(), parsed(t, dir, n).StateRecoveryKey(), n)
		data, err := os.ReadFile(filepath.Join(dir, n+".yaml"))
		require.NoError(t, err)
		assert.NotContains(t, string(data), strings.Split(strings.TrimSpace(s.RecoveryKey), "\n")[1], n)
	}
}
