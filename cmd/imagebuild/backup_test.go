package main

import (
	"bytes"
	"context"
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

// A node's volume backup opens with the secrets file alone: backup-open
// finds the node's passphrase from the file's name, and backup-key
// --node prints it for the age tool.
func TestVolumeBackupOpen(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	s, err := clustersecrets.Generate("plant-7", now, time.Hour, nil)
	require.NoError(t, err)
	secrets := filepath.Join(dir, "secrets.yaml")
	require.NoError(t, clustersecrets.Save(secrets, s))
	pass, err := backup.VolumesPassphrase([]byte(s.CA.Key), "plant-7", "w-1")
	require.NoError(t, err)
	hash, err := s.CACertHash()
	require.NoError(t, err)

	area := filepath.Join(dir, "area")
	require.NoError(t, os.MkdirAll(filepath.Join(area, "pvc-1_default_data-0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(area, "pvc-1_default_data-0", "token"), []byte("token-1"), 0o644))
	scan, err := backup.ScanVolumes(area)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = backup.WriteVolumes(context.Background(), &buf, pass, backup.VolumesManifest{Cluster: "plant-7", CACertHash: hash, Node: "w-1", TakenAt: now}, area, scan)
	require.NoError(t, err)
	file := filepath.Join(dir, backup.VolumesFileName("plant-7", "w-1", now))
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o600))

	cmd := backupOpenCmd()
	out := filepath.Join(dir, "opened")
	cmd.SetArgs([]string{"--secrets", secrets, "-o", out, file})
	require.NoError(t, cmd.Execute())
	got, err := os.ReadFile(filepath.Join(out, "pvc-1_default_data-0", "token"))
	require.NoError(t, err)
	assert.Equal(t, "token-1", string(got))

	// Renamed to another node's name, it does not open.
	other := filepath.Join(dir, backup.VolumesFileName("plant-7", "w-2", now))
	require.NoError(t, os.Rename(file, other))
	cmd = backupOpenCmd()
	cmd.SetArgs([]string{"--secrets", secrets, "-o", filepath.Join(dir, "other"), other})
	assert.ErrorIs(t, cmd.Execute(), backup.ErrNotThisNode)

	key := backupKeyCmd()
	var stdout bytes.Buffer
	key.SetArgs([]string{"--secrets", secrets, "--node", "w-1"})
	key.SetOut(&stdout)
	require.NoError(t, key.Execute())
	assert.Equal(t, pass+"\n", stdout.String())
}
