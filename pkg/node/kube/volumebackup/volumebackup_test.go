package volumebackup

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

var now = time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)

func caKey(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// nodeConfig is node's config in cluster lab with volume backups on
// (passphrase from ca) or off (ca nil).
func nodeConfig(t *testing.T, ca []byte, node string) *machineconfig.Config {
	t.Helper()
	c := &machineconfig.Config{Hostname: node, Cluster: &machineconfig.Cluster{
		Name: "lab", Role: machineconfig.RoleWorker, CACertHash: "sha256:" + strings.Repeat("ab", 32),
	}}
	if ca != nil {
		pass, err := backup.VolumesPassphrase(ca, "lab", node)
		require.NoError(t, err)
		c.Cluster.Backup = &machineconfig.Backup{VolumesPassphrase: pass}
	}
	return c
}

// newHost is a node whose volume area is made and marked, holding the
// volumes given as name → token.
func newHost(t *testing.T, volumes map[string]string) *host.Host {
	t.Helper()
	h := &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(func() time.Time { return now })}
	area := h.Path(layout.LocalVolumesDir)
	require.NoError(t, os.MkdirAll(filepath.Join(area, "lost+found"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(area, layout.LocalVolumesMarker), []byte("marker"), 0o644))
	for name, token := range volumes {
		require.NoError(t, os.MkdirAll(filepath.Join(area, name, "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(area, name, "data", "token"), []byte(token), 0o644))
	}
	return h
}

var room = WithSpace(diskspace.Fixed{Avail: 1 << 30, Total: 2 << 30, Device: 1}, 0)

// stick is a Source offering dir.
func stick(dir string) Source {
	return func(_ context.Context, fn func(string) error) (bool, error) { return true, fn(dir) }
}

func noStick(context.Context, func(string) error) (bool, error) { return false, nil }

func token(t *testing.T, h *host.Host, volume string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Path(layout.LocalVolumesDir), volume, "data", "token"))
	require.NoError(t, err)
	return string(b)
}

func TestWriteThenRestoreOnANewNode(t *testing.T) {
	ca := caKey(t)
	c := nodeConfig(t, ca, "w-1")
	old := newHost(t, map[string]string{"pvc-1_default_data-db-0": "token-1", "pvc-2_plant_logs-0": "token-2"})
	dir := t.TempDir()
	res, err := Write(context.Background(), old, c, "0.1.0", dir, room)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "terrarium-volumes-lab-w-1-20261203T050000Z.age"), res.Path)
	assert.Equal(t, 2, res.Volumes)
	assert.Equal(t, int64(2), res.Files)
	assert.Contains(t, res.String(), "of 2 volumes, 2 files")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the backup and nothing else")

	fresh := newHost(t, nil)
	got, err := Restore(context.Background(), fresh, c, stick(dir))
	require.NoError(t, err)
	require.Empty(t, got.Skipped)
	assert.Equal(t, filepath.Base(res.Path), got.File)
	require.NotNil(t, got.Manifest)
	assert.Len(t, got.Manifest.Volumes, 2)
	assert.Equal(t, "token-1", token(t, fresh, "pvc-1_default_data-db-0"))
	assert.Equal(t, "token-2", token(t, fresh, "pvc-2_plant_logs-0"))
	assert.NoDirExists(t, filepath.Join(fresh.Path(layout.LocalVolumesDir), stagingName))

	// Once the node has volumes, a stick restores nothing over them.
	again, err := Restore(context.Background(), fresh, c, stick(dir))
	require.NoError(t, err)
	assert.Contains(t, again.Skipped, "already holds volumes: pvc-1_default_data-db-0, pvc-2_plant_logs-0")
}

func TestWriteRefuses(t *testing.T) {
	ca := caKey(t)
	tests := []struct {
		name string
		c    *machineconfig.Config
		h    *host.Host
		opt  Option
		want error
	}{
		{"volumes not opted in", nodeConfig(t, nil, "w-1"), newHost(t, nil), room, ErrNotEnabled},
		{"no volume area", nodeConfig(t, ca, "w-1"), &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(time.Now)}, room, ErrNoArea},
		{"a stick too small", nodeConfig(t, ca, "w-1"), newHost(t, map[string]string{"pvc-1": "x"}), WithSpace(diskspace.Fixed{Avail: 64 << 10, Device: 1}, 0), diskspace.ErrNoSpace},
		{"TERRA-STATE's reserve", nodeConfig(t, ca, "w-1"), newHost(t, map[string]string{"pvc-1": "x"}), WithSpace(diskspace.Fixed{Avail: 1 << 30, Device: 1}, 1<<30), diskspace.ErrNoSpace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Write(context.Background(), tt.h, tt.c, "0.1.0", dir, tt.opt)
			require.ErrorIs(t, err, tt.want)
			entries, _ := os.ReadDir(dir)
			assert.Empty(t, entries, "nothing written")
		})
	}
}

func TestRestoreSkips(t *testing.T) {
	ca := caKey(t)
	dir := t.TempDir()
	_, err := Write(context.Background(), newHost(t, map[string]string{"pvc-1": "w-2's"}), nodeConfig(t, ca, "w-2"), "0.1.0", dir, room)
	require.NoError(t, err)
	tests := []struct {
		name string
		h    *host.Host
		c    *machineconfig.Config
		src  Source
		want string
	}{
		{"no stick", newHost(t, nil), nodeConfig(t, ca, "w-1"), noStick, "no TERRA-BACKUP stick"},
		{"no backup of this node", newHost(t, nil), nodeConfig(t, ca, "w-1"), stick(dir), "holds no volume backup of w-1 (terrarium-volumes-lab-w-1-<time>.age)"},
		{"volumes not opted in", newHost(t, nil), nodeConfig(t, nil, "w-2"), stick(dir), "holds terrarium-volumes-lab-w-2-20261203T050000Z.age, and this node's backups carry no volumes"},
		{"no volume area", &host.Host{Root: t.TempDir()}, nodeConfig(t, ca, "w-2"), stick(dir), "the node has no volume area"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Restore(context.Background(), tt.h, tt.c, tt.src)
			require.NoError(t, err)
			assert.Contains(t, got.Skipped, tt.want)
		})
	}
}

// A backup of another node under this node's name (or damaged) is
// refused, and the area is left as it was.
func TestRestoreRefusesAnotherNodesBackup(t *testing.T) {
	ca := caKey(t)
	dir := t.TempDir()
	res, err := Write(context.Background(), newHost(t, map[string]string{"pvc-1": "w-2's"}), nodeConfig(t, ca, "w-2"), "0.1.0", dir, room)
	require.NoError(t, err)
	require.NoError(t, os.Rename(res.Path, filepath.Join(dir, "terrarium-volumes-lab-w-1-20261203T050000Z.age")))
	h := newHost(t, nil)
	_, err = Restore(context.Background(), h, nodeConfig(t, ca, "w-1"), stick(dir))
	require.ErrorIs(t, err, backup.ErrNotThisNode)
	assert.Contains(t, err.Error(), "restore volumes from terrarium-volumes-lab-w-1-20261203T050000Z.age")
	entries, err := os.ReadDir(h.Path(layout.LocalVolumesDir))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{layout.LocalVolumesMarker, "lost+found"}, names, "the area is as it was")
}

// A restore cut by a power loss starts again when the unpacking was not
// complete, and only finishes the moves when it was.
func TestRestoreAfterAPowerCut(t *testing.T) {
	ca := caKey(t)
	c := nodeConfig(t, ca, "w-1")
	dir := t.TempDir()
	_, err := Write(context.Background(), newHost(t, map[string]string{"pvc-1": "one", "pvc-2": "two"}), c, "0.1.0", dir, room)
	require.NoError(t, err)

	t.Run("cut while unpacking", func(t *testing.T) {
		h := newHost(t, nil)
		staging := filepath.Join(h.Path(layout.LocalVolumesDir), stagingName)
		require.NoError(t, os.MkdirAll(filepath.Join(staging, "pvc-1", "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(staging, "pvc-1", "data", "token"), []byte("o"), 0o644))
		got, err := Restore(context.Background(), h, c, stick(dir))
		require.NoError(t, err)
		require.Empty(t, got.Skipped)
		assert.Equal(t, "one", token(t, h, "pvc-1"), "unpacked again, whole")
		assert.Equal(t, "two", token(t, h, "pvc-2"))
	})
	t.Run("cut while moving", func(t *testing.T) {
		h := newHost(t, nil)
		area := h.Path(layout.LocalVolumesDir)
		staging := filepath.Join(area, stagingName)
		// pvc-1 was moved before the cut; pvc-2 still waits.
		require.NoError(t, os.MkdirAll(filepath.Join(area, "pvc-1", "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(area, "pvc-1", "data", "token"), []byte("one"), 0o644))
		require.NoError(t, os.MkdirAll(filepath.Join(staging, "pvc-2", "data"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(staging, "pvc-2", "data", "token"), []byte("two"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(staging, completeName), []byte("terrarium-volumes-lab-w-1-20261203T050000Z.age\n"), 0o600))
		got, err := Restore(context.Background(), h, c, func(context.Context, func(string) error) (bool, error) {
			return false, errors.New("the stick is not read again")
		})
		require.NoError(t, err)
		assert.Equal(t, "terrarium-volumes-lab-w-1-20261203T050000Z.age", got.File)
		assert.Equal(t, "one", token(t, h, "pvc-1"))
		assert.Equal(t, "two", token(t, h, "pvc-2"))
		assert.NoDirExists(t, staging)
	})
}
