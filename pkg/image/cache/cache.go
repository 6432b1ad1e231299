// Package cache is imagebuild's content-addressed store: every expensive
// artifact (a rootfs tarball, an initramfs, a slot squashfs) lives in a
// directory named by the hash of everything that went into it, so a second
// build with the same inputs does no work.
package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
// time is when a build last used it, which is what Prune goes by.
type Cache struct {
	root string
	now  func() time.Time

	mu    sync.Mutex
	inUse map[string]bool // entries this Cache handed out: Prune spares them
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
	c := &Cache{root: dir, now: time.Now, inUse: map[string]bool{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// use records that this build uses the entry at p: Prune spares it, and
// its modification time says when it was last used. A cache on a
// read-only disk still serves its entries, so a failed stamp is no error.
func (c *Cache) use(p string) {
	c.mu.Lock()
	c.inUse[p] = true
	c.mu.Unlock()
	now := c.now()
	_ = os.Chtimes(p, now, now) // only Prune's order depends on it
}

// Root is the cache directory.
func (c *Cache) Root() string { return c.root }

// Path is where the entry kind/key lives (whether or not it exists).
func (c *Cache) Path(kind, key string) string {
	return filepath.Join(c.root, kind, key)
}

// Lookup returns the entry's path if it is complete, and marks it used.
func (c *Cache) Lookup(kind, key string) (string, bool) {
	p := c.Path(kind, key)
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		c.use(p)
		return p, true
	}
	return "", false
}

// Fill returns the entry kind/key, creating it with fill when absent. fill
// writes into a fresh temporary directory which becomes the entry only when
// fill succeeds, so an interrupted build never leaves a half entry. The
// second return value reports whether the entry was already there.
func (c *Cache) Fill(ctx context.Context, kind, key string, fill func(ctx context.Context, dir string) error) (string, bool, error) {
	if p, ok := c.Lookup(kind, key); ok {
		return p, true, nil
	}
	parent := filepath.Join(c.root, kind)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", false, fmt.Errorf("cache %s: %w", kind, err)
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix+key[:min(12, len(key))]+"-")
	if err != nil {
		return "", false, fmt.Errorf("cache %s: %w", kind, err)
	}
	if err := fill(ctx, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", false, err
	}
	final := c.Path(kind, key)
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		if p, ok := c.Lookup(kind, key); ok { // a concurrent build won
			return p, true, nil
		}
		return "", false, fmt.Errorf("cache %s: commit %s: %w", kind, key, err)
	}
	c.use(final)
	return final, false, nil
}
