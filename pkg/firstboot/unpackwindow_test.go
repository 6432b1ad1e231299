package firstboot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/layout"
)

func TestUnpackWindow(t *testing.T) {
	root := t.TempDir()
	h := &Host{Root: root}
	require.NoError(t, os.MkdirAll(h.Path(layout.StateMount), 0o755))

	closed, err := closeUnpackWindow(h)
	require.NoError(t, err)
	assert.False(t, closed, "no window was open")

	require.NoError(t, openUnpackWindow(h, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	b, err := os.ReadFile(unpackWindowPath(h))
	require.NoError(t, err)
	assert.Equal(t, "opened 2026-01-02T03:04:05Z\n", string(b))
	// Opening again keeps the first time.
	require.NoError(t, openUnpackWindow(h, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)))
	b, err = os.ReadFile(unpackWindowPath(h))
	require.NoError(t, err)
	assert.Contains(t, string(b), "2026-01-02")

	closed, err = closeUnpackWindow(h)
	require.NoError(t, err)
	assert.True(t, closed)
	assert.NoFileExists(t, unpackWindowPath(h))
}

func TestRepairRuntime(t *testing.T) {
	seed := func(t *testing.T, window bool) string {
		root := t.TempDir()
		store := filepath.Join(root, layout.ContainerdRoot)
		blob := filepath.Join(store, "io.containerd.snapshotter.v1.overlayfs", "snapshots", "7", "fs", "usr", "local", "bin", "etcd")
		require.NoError(t, os.MkdirAll(filepath.Dir(blob), 0o755))
		require.NoError(t, os.WriteFile(blob, nil, 0o755)) // torn: empty
		if window {
			require.NoError(t, openUnpackWindow(&Host{Root: root}, time.Now()))
		}
		return root
	}
	t.Run("window open: store removed, window kept", func(t *testing.T) {
		root := seed(t, true)
		var console bytes.Buffer
		removed, err := RepairRuntime(root, &console)
		require.NoError(t, err)
		assert.True(t, removed)
		assert.NoDirExists(t, filepath.Join(root, layout.ContainerdRoot))
		assert.NoDirExists(t, filepath.Join(root, layout.ContainerdRoot+".torn"))
		assert.FileExists(t, unpackWindowPath(&Host{Root: root}), "the window closes only once the new images are durable")
		assert.Contains(t, console.String(), "may hold torn images")
	})
	t.Run("window closed: store kept", func(t *testing.T) {
		root := seed(t, false)
		var console bytes.Buffer
		removed, err := RepairRuntime(root, &console)
		require.NoError(t, err)
		assert.False(t, removed)
		assert.DirExists(t, filepath.Join(root, layout.ContainerdRoot, "io.containerd.snapshotter.v1.overlayfs"))
		assert.Empty(t, console.String())
	})
	t.Run("a removal cut short is finished", func(t *testing.T) {
		root := seed(t, true)
		torn := filepath.Join(root, layout.ContainerdRoot+".torn", "leftover")
		require.NoError(t, os.MkdirAll(torn, 0o755))
		removed, err := RepairRuntime(root, &bytes.Buffer{})
		require.NoError(t, err)
		assert.True(t, removed)
		assert.NoDirExists(t, filepath.Join(root, layout.ContainerdRoot+".torn"))
	})
}
