// Package cache is imagebuild's content-addressed store: every expensive
// artifact (a rootfs tarball, an initramfs, a slot squashfs) lives in a
// directory named by the hash of everything that went into it, so a second
// build with the same inputs does no work.
package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// EnvDir names the environment variable that moves the cache.
const EnvDir = "TERRARIUM_CACHE"

// DefaultDir is $TERRARIUM_CACHE, or ~/.cache/terrarium.
func DefaultDir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "terrarium")
	}
	return filepath.Join(os.TempDir(), "terrarium-cache")
}

// Cache is a content-addressed directory store. An entry's modification
// time is when a build last used it, which is what Prune goes by. Every
// entry a Cache hands out, and every entry it is filling, is held under a
// shared lock (flock(2) on its directory) until Close or the process's
// exit: Prune, in this process or another, removes only what it can lock
// exclusively.
type Cache struct {
	root string
	now  func() time.Time

	mu   sync.Mutex
	held map[string]*os.File // entry path → its directory, locked shared
}

// Option configures a Cache.
type Option func(*Cache)

// WithClock sets the clock that stamps an entry's use (time.Now by
// default).
func WithClock(now func() time.Time) Option { return func(c *Cache) { c.now = now } }

// New opens (and creates) a cache rooted at dir.
func New(dir string, opts ...Option) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache %s: %w", dir, err)
	}
	c := &Cache{root: dir, now: time.Now, held: map[string]*os.File{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Close releases the entries this Cache holds; a Prune may then remove
// them. The process's exit does the same.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for p, f := range c.held {
		errs = append(errs, f.Close())
		delete(c.held, p)
	}
	return errors.Join(errs...)
}

// hold locks the entry directory at p shared for this Cache's life and
// stamps its use. It reports false when p is no entry any more: a
// concurrent Prune renamed it away between the caller's look and the
// lock. The lock is taken outside c.mu: it waits while a Prune removes
// that entry, and only then.
func (c *Cache) hold(p string) (bool, error) {
	if c.holds(p) {
		c.stamp(p)
		return true, nil
	}
	f, err := lockDir(p, syscall.LOCK_SH)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("hold cache entry %s: %w", p, err)
	}
	if !stillAt(f, p) {
		_ = f.Close() // read only
		return false, nil
	}
	c.mu.Lock()
	if _, ok := c.held[p]; ok { // another goroutine of this build took it
		_ = f.Close() // read only
	} else {
		c.held[p] = f
	}
	c.mu.Unlock()
	c.stamp(p)
	return true, nil
}

// stamp sets the entry's modification time to now: its last use. A cache
// on a read-only disk still serves its entries, so a failed stamp is no
// error; only Prune's order depends on it.
func (c *Cache) stamp(p string) {
	now := c.now()
	_ = os.Chtimes(p, now, now)
}

// holds reports whether this Cache holds the entry at p.
func (c *Cache) holds(p string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[p]
	return ok
}

// lockDir opens the directory dir and flocks it with how (LOCK_SH,
// LOCK_EX, with LOCK_NB or not). On a file system without locks (some
// network ones) it returns dir open and unlocked: the cache then works
// as before it had locks, its entries spared by their age alone.
func lockDir(dir string, how int) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil && !noLocks(err) {
		_ = f.Close() // read only
		return nil, err
	}
	return f, nil
}

// noLocks reports whether err is flock's answer on a file system that
// has no locks.
func noLocks(err error) bool {
	return errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS)
}

// stillAt reports whether the path p still names the directory open as f.
func stillAt(f *os.File, p string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(p)
	return err == nil && os.SameFile(a, b)
}

// Root is the cache directory.
func (c *Cache) Root() string { return c.root }

// Path is where the entry kind/key lives (whether or not it exists).
func (c *Cache) Path(kind, key string) string {
	return filepath.Join(c.root, kind, key)
}

// Lookup returns the entry's path if it is complete, and holds it for
// this Cache's life, stamped with its use. An entry that cannot be held
// (the process out of file descriptors, say) is a miss: Fill says why.
func (c *Cache) Lookup(kind, key string) (string, bool) {
	p, ok, _ := c.lookup(kind, key)
	return p, ok
}

func (c *Cache) lookup(kind, key string) (string, bool, error) {
	p := c.Path(kind, key)
	fi, err := os.Stat(p)
	if err != nil || !fi.IsDir() {
		return "", false, nil
	}
	ok, err := c.hold(p)
	if !ok {
		return "", false, err
	}
	return p, true, nil
}

// Fill returns the entry kind/key, creating it with fill when absent. fill
// writes into a fresh temporary directory which becomes the entry only when
// fill succeeds, so an interrupted build never leaves a half entry. The
// second return value reports whether the entry was already there.
func (c *Cache) Fill(ctx context.Context, kind, key string, fill func(ctx context.Context, dir string) error) (string, bool, error) {
	if p, ok, err := c.lookup(kind, key); ok || err != nil {
		return p, ok, err
	}
	parent := filepath.Join(c.root, kind)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", false, fmt.Errorf("cache %s: %w", kind, err)
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix+key[:min(12, len(key))]+"-")
	if err != nil {
		return "", false, fmt.Errorf("cache %s: %w", kind, err)
	}
	// Locked while it fills, so that no Prune takes it for the leftover
	// of an interrupted fill; the lock holds the entry once renamed.
	lock, err := lockDir(tmp, syscall.LOCK_SH)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", false, fmt.Errorf("cache %s: lock %s: %w", kind, tmp, err)
	}
	if err := fill(ctx, tmp); err != nil {
		_ = lock.Close() // read only
		_ = os.RemoveAll(tmp)
		return "", false, err
	}
	final := c.Path(kind, key)
	if err := os.Rename(tmp, final); err != nil {
		_ = lock.Close() // read only
		_ = os.RemoveAll(tmp)
		if p, ok, herr := c.lookup(kind, key); ok { // a concurrent build won
			return p, true, nil
		} else if herr != nil {
			err = herr
		}
		return "", false, fmt.Errorf("cache %s: commit %s: %w", kind, key, err)
	}
	c.mu.Lock()
	c.held[final] = lock // the rename succeeded: no one held final
	c.mu.Unlock()
	c.stamp(final)
	return final, false, nil
}
