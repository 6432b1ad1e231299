package unpackwindow

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

func TestUnpackWindow(t *testing.T) {
	root := t.TempDir()
	h := testHost(root, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	require.NoError(t, os.MkdirAll(h.Path(layout.StateMount), 0o755))
	setBootID(t, root, "boot-1")

	closed, err := Close(h)
	require.NoError(t, err)
	assert.False(t, closed, "no window was open")

	require.NoError(t, Open(h))
	b, err := os.ReadFile(path(h))
	require.NoError(t, err)
	assert.Equal(t, "opened 2026-01-02T03:04:05Z boot boot-1\n", string(b))
	// Opening again keeps the first time.
	h.Clock = host.ClockFunc(func() time.Time { return time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC) })
	require.NoError(t, Open(h))
	b, err = os.ReadFile(path(h))
	require.NoError(t, err)
	assert.Contains(t, string(b), "2026-01-02")

	closed, err = Close(h)
	require.NoError(t, err)
	assert.True(t, closed)
	assert.NoFileExists(t, path(h))
}

// A window a cut boot left open is Repair's: Close, which may run before
// the repair in the next boot, leaves it.
func TestCloseLeavesAWindowOfAnotherBoot(t *testing.T) {
	root := t.TempDir()
	h := testHost(root, time.Now())
	require.NoError(t, os.MkdirAll(h.Path(layout.StateMount), 0o755))
	setBootID(t, root, "cut-boot")
	require.NoError(t, Open(h))
	setBootID(t, root, "this-boot")

	closed, err := Close(h)
	require.NoError(t, err)
	assert.False(t, closed)
	require.FileExists(t, path(h), "the next repair still finds the window")

	// Once Repair has made it this boot's, Close closes it.
	_, err = Repair(h, &bytes.Buffer{})
	require.NoError(t, err)
	closed, err = Close(h)
	require.NoError(t, err)
	assert.True(t, closed)
	assert.NoFileExists(t, path(h))
}

func TestRepair(t *testing.T) {
	seed := func(t *testing.T, window bool) string {
		root := t.TempDir()
		store := filepath.Join(root, layout.ContainerdRoot)
		blob := filepath.Join(store, "io.containerd.snapshotter.v1.overlayfs", "snapshots", "7", "fs", "usr", "local", "bin", "etcd")
		require.NoError(t, os.MkdirAll(filepath.Dir(blob), 0o755))
		require.NoError(t, os.WriteFile(blob, nil, 0o755)) // torn: empty
		snap := filepath.Join(root, layout.SnapshotterRoot, "snapshots", "9", "fs", "bin", "sh")
		require.NoError(t, os.MkdirAll(filepath.Dir(snap), 0o755))
		require.NoError(t, os.WriteFile(snap, nil, 0o755)) // torn: empty
		if window {
			setBootID(t, root, "cut-boot")
			require.NoError(t, Open(testHost(root, time.Now())))
		}
		setBootID(t, root, "this-boot")
		return root
	}
	t.Run("window open: store removed, window kept", func(t *testing.T) {
		root := seed(t, true)
		var console bytes.Buffer
		removed, err := Repair(testHost(root, time.Now()), &console)
		require.NoError(t, err)
		assert.True(t, removed)
		assert.NoDirExists(t, filepath.Join(root, layout.ContainerdRoot))
		assert.NoDirExists(t, filepath.Join(root, layout.ContainerdRoot+".torn"))
		assert.NoDirExists(t, filepath.Join(root, layout.SnapshotterRoot), "the snapshotter's snapshots too")
		w, err := os.ReadFile(path(testHost(root, time.Now())))
		require.NoError(t, err, "the window closes only once the new images are durable")
		assert.Equal(t, "this-boot", windowBootID(w))
		assert.Contains(t, console.String(), "may hold torn images")

		// containerd restarts later in the same boot: what it unpacked
		// since is kept.
		require.NoError(t, os.MkdirAll(filepath.Join(root, layout.ContainerdRoot, "new"), 0o755))
		removed, err = Repair(testHost(root, time.Now()), &console)
		require.NoError(t, err)
		assert.False(t, removed)
		assert.DirExists(t, filepath.Join(root, layout.ContainerdRoot, "new"))
	})
	t.Run("window closed: store kept", func(t *testing.T) {
		root := seed(t, false)
		var console bytes.Buffer
		removed, err := Repair(testHost(root, time.Now()), &console)
		require.NoError(t, err)
		assert.False(t, removed)
		assert.DirExists(t, filepath.Join(root, layout.ContainerdRoot, "io.containerd.snapshotter.v1.overlayfs"))
		assert.DirExists(t, filepath.Join(root, layout.SnapshotterRoot, "snapshots"))
		assert.Empty(t, console.String())
	})
	t.Run("window open, no store left: the window becomes this boot's", func(t *testing.T) {
		root := seed(t, true)
		require.NoError(t, os.RemoveAll(filepath.Join(root, layout.ContainerdRoot)))
		require.NoError(t, os.RemoveAll(filepath.Join(root, layout.SnapshotterRoot)))
		removed, err := Repair(testHost(root, time.Now()), &bytes.Buffer{})
		require.NoError(t, err)
		assert.False(t, removed)
		w, err := os.ReadFile(path(testHost(root, time.Now())))
		require.NoError(t, err, "the window stays open")
		assert.Equal(t, "this-boot", windowBootID(w), "else the stores containerd fills this boot go at the next")
	})
	t.Run("a removal cut short is finished", func(t *testing.T) {
		root := seed(t, true)
		torn := filepath.Join(root, layout.ContainerdRoot+".torn", "leftover")
		require.NoError(t, os.MkdirAll(torn, 0o755))
		removed, err := Repair(testHost(root, time.Now()), &bytes.Buffer{})
		require.NoError(t, err)
		assert.True(t, removed)
		assert.NoDirExists(t, filepath.Join(root, layout.ContainerdRoot+".torn"))
	})
}

func setBootID(t *testing.T, root, id string) {
	t.Helper()
	p := filepath.Join(root, "/proc/sys/kernel/random/boot_id")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(id+"\n"), 0o644))
}

func testHost(root string, now time.Time) *host.Host {
	return &host.Host{Root: root, Clock: host.ClockFunc(func() time.Time { return now })}
}

func TestCloseAtShutdown(t *testing.T) {
	tests := []struct {
		name       string
		states     string
		open       bool
		wantClosed bool
		wantSay    string
	}{
		{"both stopped: closed", "inactive\ninactive\n", true, true, "image unpack window is closed"},
		{"one failed, one stopped: closed", "failed\ninactive\n", true, true, "image unpack window is closed"},
		{"containerd still runs: kept open", "active\ninactive\n", true, false, "containerd.service is active"},
		{"the snapshotter still stops: kept open", "inactive\ndeactivating\n", true, false, "terrarium-snapshotter.service is deactivating"},
		{"no window: nothing to close", "inactive\ninactive\n", false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			var asked []string
			h := testHost(root, time.Now())
			h.Executor = host.ExecFunc(func(_ context.Context, name string, args ...string) ([]byte, error) {
				asked = append([]string{name}, args...)
				return []byte(tt.states), nil
			})
			require.NoError(t, os.MkdirAll(h.Path(layout.StateMount), 0o755))
			setBootID(t, root, "boot-1")
			if tt.open {
				require.NoError(t, Open(h))
			}
			var console bytes.Buffer
			closed, err := CloseAtShutdown(context.Background(), h, &console)
			require.NoError(t, err)
			assert.Equal(t, tt.wantClosed, closed)
			assert.Equal(t, []string{"systemctl", "show", "--property=ActiveState", "--value", "containerd.service", "terrarium-snapshotter.service"}, asked)
			if tt.open && !tt.wantClosed {
				assert.FileExists(t, path(h), "the window stays open while containerd may unpack")
			} else {
				assert.NoFileExists(t, path(h))
			}
			if tt.wantSay == "" {
				assert.Empty(t, console.String())
			} else {
				assert.Contains(t, console.String(), tt.wantSay)
			}
		})
	}
	t.Run("systemd does not answer: an error, the window kept", func(t *testing.T) {
		root := t.TempDir()
		h := testHost(root, time.Now())
		h.Executor = host.ExecFunc(func(context.Context, string, ...string) ([]byte, error) {
			return []byte("Failed to connect to bus"), errors.New("exit status 1")
		})
		require.NoError(t, os.MkdirAll(h.Path(layout.StateMount), 0o755))
		setBootID(t, root, "boot-1")
		require.NoError(t, Open(h))
		_, err := CloseAtShutdown(context.Background(), h, &bytes.Buffer{})
		require.ErrorContains(t, err, "whether containerd has stopped")
		assert.FileExists(t, path(h))
	})
}
