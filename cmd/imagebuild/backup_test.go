package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
)

// The operator opens a node's backup with the secrets file alone; another
// cluster's secrets do not open it, and a non-empty -o is refused.
func TestBackupOpen(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	secretsFile := func(name string) string {
		s, err := clustersecrets.Generate(name, now, time.Hour, nil)
		require.NoError(t, err)
		p := filepath.Join(dir, name+".yaml")
		require.NoError(t, clustersecrets.Save(p, s))
		return p
	}
	mine, other := secretsFile("plant-7"), secretsFile("plant-8")
	s, pass, err := backupPassphrase(mine)
	require.NoError(t, err)
	hash, err := s.CACertHash()
	require.NoError(t, err)

	snap := filepath.Join(dir, "snap.db")
	require.NoError(t, os.WriteFile(snap, []byte("etcd"), 0o600))
	pki := map[string][]byte{}
	for _, f := range backup.PKIFiles {
		pki[f] = []byte(f)
	}
	var buf bytes.Buffer
	require.NoError(t, backup.Write(&buf, pass, backup.Manifest{Cluster: "plant-7", CACertHash: hash, Node: "cp-1", TakenAt: now}, snap, pki))
	file := filepath.Join(dir, backup.FileName("plant-7", "cp-1", now))
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o600))

	open := func(secrets, out string) error {
		cmd := backupOpenCmd()
		cmd.SetArgs([]string{"--secrets", secrets, "-o", out, file})
		cmd.SetOut(&bytes.Buffer{})
		return cmd.Execute()
	}
	out := filepath.Join(dir, "opened")
	require.NoError(t, open(mine, out))
	got, err := os.ReadFile(filepath.Join(out, backup.SnapshotName))
	require.NoError(t, err)
	assert.Equal(t, "etcd", string(got))

	assert.ErrorContains(t, open(mine, out), "is not empty", "an unpacked backup is never overwritten")
	assert.ErrorIs(t, open(other, filepath.Join(dir, "other")), backup.ErrNotThisCluster)
	_, _, err = backupPassphrase("")
	assert.ErrorContains(t, err, "give --secrets")
}
