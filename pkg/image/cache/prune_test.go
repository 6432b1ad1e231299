package cache

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func hashKey(c byte) string { return strings.Repeat(string(c), 64) }

// put makes the entry kind/key of size bytes, last used at used.
func put(t *testing.T, root, kind, key string, size int, used time.Time) string {
	t.Helper()
	dir := filepath.Join(root, kind, key)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data"), make([]byte, size), 0o644))
	require.NoError(t, os.Chtimes(dir, used, used))
	return dir
}

func TestPruneRemovesLeastRecentlyUsedFirst(t *testing.T) {
	root := t.TempDir()
	now := t0
	c, err := New(root, WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	handedOut := put(t, root, "slot", hashKey('e'), 400, t0.Add(-96*time.Hour))
	_, ok := c.Lookup("slot", hashKey('e')) // this build uses it, and long after
	require.True(t, ok)
	now = t0.Add(48 * time.Hour)
	oldest := put(t, root, "slot", hashKey('a'), 400, now.Add(-72*time.Hour))
	older := put(t, root, "slot", hashKey('b'), 400, now.Add(-50*time.Hour))
	old := put(t, root, "programs", hashKey('c'), 100, now.Add(-24*time.Hour))
	recent := put(t, root, "slot", hashKey('d'), 400, now.Add(-10*time.Minute)) // another build may read it
	blobs := filepath.Join(root, "bundle-blobs", "blobs")
	require.NoError(t, os.MkdirAll(blobs, 0o755))
	require.NoError(t, os.Chtimes(blobs, t0.Add(-1000*time.Hour), t0.Add(-1000*time.Hour)))

	res, err := c.Prune(1000, time.Hour)
	require.NoError(t, err)

	var removed []string
	for _, e := range res.Removed {
		removed = append(removed, filepath.Join(root, e.Kind, e.Key))
	}
	assert.Equal(t, []string{oldest, older}, removed, "the two least recently used that no build holds go, oldest first, until the cache fits")
	assert.Equal(t, int64(800), res.RemovedBytes)
	assert.Equal(t, int64(900), res.KeptBytes)
	assert.Equal(t, 3, res.Kept)
	for _, p := range []string{old, recent, handedOut, blobs} {
		assert.DirExists(t, p)
	}
	for _, p := range []string{oldest, older} {
		assert.NoDirExists(t, p)
	}
	left, err := os.ReadDir(filepath.Join(root, "slot"))
	require.NoError(t, err)
	assert.Len(t, left, 2, "nothing of the removed entries is left behind")
}

// Another build's entries are held by its locks, whatever their age;
// once it closes its cache, they may go.
func TestPruneSparesWhatAnotherBuildHolds(t *testing.T) {
	root := t.TempDir()
	other, err := New(root, WithClock(func() time.Time { return t0 }))
	require.NoError(t, err)
	held := put(t, root, "slot", hashKey('a'), 400, t0)
	_, ok := other.Lookup("slot", hashKey('a'))
	require.True(t, ok)
	filling, release, filled := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, _, err := other.Fill(context.Background(), "slot", hashKey('b'), func(_ context.Context, dir string) error {
			err := os.Chtimes(dir, t0, t0)
			close(filling)
			<-release // until the prune below is done
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "data"), make([]byte, 400), 0o644)
		})
		filled <- err
	}()
	<-filling

	later, err := New(root, WithClock(func() time.Time { return t0.Add(1000 * time.Hour) }))
	require.NoError(t, err)
	res, err := later.Prune(0, time.Hour)
	require.NoError(t, err)
	assert.Empty(t, res.Removed, "held, however old")
	assert.DirExists(t, held)
	tmps, err := filepath.Glob(filepath.Join(root, "slot", tmpPrefix+"*"))
	require.NoError(t, err)
	assert.Len(t, tmps, 1, "a fill in progress is no leftover")
	close(release)
	require.NoError(t, <-filled)
	res, err = later.Prune(0, time.Hour)
	require.NoError(t, err)
	assert.Empty(t, res.Removed, "a finished fill stays held under the name it was renamed to")

	require.NoError(t, other.Close())
	res, err = later.Prune(0, time.Hour)
	require.NoError(t, err)
	assert.Len(t, res.Removed, 2, "released, both go")
	assert.NoDirExists(t, held)
}

// Sources (a .deb the archive may have dropped since) are never removed
// and do not count toward the bound.
func TestPruneKeepsSources(t *testing.T) {
	root := t.TempDir()
	c, err := New(root, WithClock(func() time.Time { return t0 }))
	require.NoError(t, err)
	deb := put(t, root, "debs", hashKey('a'), 500, t0.Add(-1000*time.Hour))
	slot := put(t, root, "slot", hashKey('b'), 300, t0.Add(-10*time.Hour))
	res, err := c.Prune(400, time.Hour, "debs")
	require.NoError(t, err)
	assert.Empty(t, res.Removed, "the slot alone fits the bound")
	assert.DirExists(t, deb)
	assert.DirExists(t, slot)
	res, err = c.Prune(0, time.Hour, "debs")
	require.NoError(t, err)
	require.Len(t, res.Removed, 1)
	assert.Equal(t, "slot", res.Removed[0].Kind)
	assert.DirExists(t, deb, "however old")
}

func TestPruneKeepsWhatIsInUseOverTheBound(t *testing.T) {
	root := t.TempDir()
	c, err := New(root, WithClock(func() time.Time { return t0 }))
	require.NoError(t, err)
	recent := put(t, root, "slot", hashKey('a'), 500, t0.Add(-time.Minute))
	res, err := c.Prune(100, time.Hour)
	require.NoError(t, err)
	assert.Empty(t, res.Removed)
	assert.Equal(t, int64(500), res.KeptBytes, "the cache stays above its bound rather than pull an entry from under a build")
	assert.DirExists(t, recent)
}

func TestPruneClearsInterruptedFills(t *testing.T) {
	root := t.TempDir()
	c, err := New(root, WithClock(func() time.Time { return t0 }))
	require.NoError(t, err)
	stale := filepath.Join(root, "slot", tmpPrefix+"abc-1")
	fresh := filepath.Join(root, "slot", tmpPrefix+"abc-2")
	evicting := filepath.Join(root, "slot", evictPrefix+"3")
	for p, at := range map[string]time.Time{stale: t0.Add(-2 * time.Hour), fresh: t0.Add(-time.Minute), evicting: t0.Add(-3 * time.Hour)} {
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.Chtimes(p, at, at))
	}
	_, err = c.Prune(1<<30, time.Hour)
	require.NoError(t, err)
	assert.NoDirExists(t, stale)
	assert.NoDirExists(t, evicting)
	assert.DirExists(t, fresh, "a fill still being written stays")
}

func TestFillAndLookupMarkUse(t *testing.T) {
	root := t.TempDir()
	now := t0
	c, err := New(root, WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	p, cached, err := c.Fill(context.Background(), "slot", hashKey('a'), func(_ context.Context, dir string) error {
		return os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	})
	require.NoError(t, err)
	require.False(t, cached)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.True(t, fi.ModTime().Equal(t0), "a new entry is stamped with its use")

	other, err := New(root, WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	now = t0.Add(30 * 24 * time.Hour)
	_, ok := other.Lookup("slot", hashKey('a'))
	require.True(t, ok)
	fi, err = os.Stat(p)
	require.NoError(t, err)
	assert.True(t, fi.ModTime().Equal(now), "a hit moves the entry's last use")
}

func TestParseMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"", DefaultMax, false},
		{"off", 0, false},
		{"OFF", 0, false},
		{"20GiB", 20 << 30, false},
		{"20G", 20 << 30, false},
		{" 512 MiB ", 512 << 20, false},
		{"1t", 1 << 40, false},
		{"4096", 4096, false},
		{"100b", 100, false},
		{"0", 0, true},
		{"-1G", 0, true},
		{"twenty", 0, true},
		{"1.5G", 0, true},
		{"99999999999T", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMax(tc.in)
			if tc.err {
				require.Error(t, err)
				assert.Contains(t, err.Error(), EnvMax, "the message names the setting")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseMax(f *testing.F) {
	for _, s := range []string{"", "off", "20GiB", "1t", "-3", "9223372036854775807", "1 kib"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseMax(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseMax(%q) = %d: negative", s, n)
		}
	})
}

// evict tells a removed entry from one another prune took (its size no
// longer counts) and from one it must leave.
func TestEvict(t *testing.T) {
	root := t.TempDir()
	old := put(t, root, "slot", hashKey('a'), 10, t0.Add(-48*time.Hour))
	got, err := evict(filepath.Join(root, "slot", hashKey('z')), t0)
	require.NoError(t, err)
	assert.Equal(t, goneAlready, got, "no such entry")

	held, err := lockDir(old, syscall.LOCK_SH)
	require.NoError(t, err)
	got, err = evict(old, t0)
	require.NoError(t, err)
	assert.Equal(t, stayed, got, "held by a build")
	require.NoError(t, held.Close())

	got, err = evict(old, t0.Add(-72*time.Hour))
	require.NoError(t, err)
	assert.Equal(t, stayed, got, "used after the cutoff")

	got, err = evict(old, t0)
	require.NoError(t, err)
	assert.Equal(t, evicted, got)
	assert.NoDirExists(t, old)
}

func TestNoLocks(t *testing.T) {
	for _, err := range []error{syscall.ENOLCK, syscall.EOPNOTSUPP, syscall.ENOSYS, &os.PathError{Op: "flock", Err: syscall.ENOLCK}} {
		assert.True(t, noLocks(err), "%v: a file system without locks", err)
	}
	for _, err := range []error{syscall.EWOULDBLOCK, syscall.EBADF, syscall.EINTR} {
		assert.False(t, noLocks(err), "%v", err)
	}
}
