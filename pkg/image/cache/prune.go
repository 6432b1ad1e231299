package cache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvMax names the environment variable that bounds the cache's size
// ("20GiB"; "off" keeps everything).
const EnvMax = "TERRARIUM_CACHE_MAX"

// DefaultMax is the size a build prunes the cache back to when $EnvMax is
// unset: every build writes a new slot entry of about 850 MiB when its
// programs changed, so an unbounded cache fills a build host's disk.
const DefaultMax = 20 << 30

// DefaultGrace is how long an entry stays after its last use, whatever the
// cache's size: another build running beside this one may be using it.
const DefaultGrace = time.Hour

const (
	tmpPrefix   = ".tmp-"   // an entry being filled
	evictPrefix = ".evict-" // an entry being removed
)

// Entry is one artifact in the cache.
type Entry struct {
	Kind, Key string
	Size      int64     // bytes of its files
	Used      time.Time // when a build last used it
}

// leftover is a temporary directory of an interrupted fill or prune, or
// of one still running.
type leftover struct {
	path     string
	modified time.Time
}

// scan lists, in one pass over the cache, its artifacts (the kind/key
// directories whose key is a content hash) but those of the kinds in
// skip, and its leftovers. Other directories under the root (the bundle
// blob store, an OCI layout of its own) are neither.
func (c *Cache) scan(skip []string) ([]Entry, []leftover, error) {
	kinds, err := os.ReadDir(c.root)
	if err != nil {
		return nil, nil, fmt.Errorf("list cache %s: %w", c.root, err)
	}
	var entries []Entry
	var left []leftover
	for _, k := range kinds {
		if !k.IsDir() {
			continue
		}
		dir := filepath.Join(c.root, k.Name())
		names, err := os.ReadDir(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("list cache %s: %w", k.Name(), err)
		}
		for _, e := range names {
			fi, err := e.Info()
			if err != nil || !e.IsDir() {
				continue // removed by a concurrent prune, or no entry
			}
			switch {
			case strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasPrefix(e.Name(), evictPrefix):
				left = append(left, leftover{path: filepath.Join(dir, e.Name()), modified: fi.ModTime()})
			case isHash(e.Name()) && !slices.Contains(skip, k.Name()):
				size, err := dirSize(filepath.Join(dir, e.Name()))
				if err != nil {
					return nil, nil, err
				}
				entries = append(entries, Entry{Kind: k.Name(), Key: e.Name(), Size: size, Used: fi.ModTime()})
			}
		}
	}
	return entries, left, nil
}

// PruneResult is what Prune removed and what it kept.
type PruneResult struct {
	Removed      []Entry
	RemovedBytes int64
	KeptBytes    int64
	Kept         int
}

// Prune removes the least recently used entries until the cache holds at
// most limit bytes. Entries of the kinds in sources are inputs that cannot
// be made again (a .deb the archive has dropped since): never removed, and
// not counted. It removes only an entry it can lock exclusively, so
// never one that a build (this one or another, in any process) holds; nor
// one used within grace. The cache can so stay above limit. It also
// clears what interrupted fills and prunes left behind. An entry is
// renamed away under its lock before it is removed, so a concurrent build
// sees it either whole or not at all.
func (c *Cache) Prune(limit int64, grace time.Duration, sources ...string) (PruneResult, error) {
	var res PruneResult
	entries, left, err := c.scan(sources)
	if err != nil {
		return res, err
	}
	now := c.now()
	if err := clearLeftovers(left, now.Add(-grace)); err != nil {
		return res, err
	}
	slices.SortFunc(entries, func(a, b Entry) int { return a.Used.Compare(b.Used) })
	var total int64
	for _, e := range entries {
		total += e.Size
	}
	taken := 0
	for _, e := range entries {
		if total <= limit {
			break
		}
		p := c.Path(e.Kind, e.Key)
		if c.holds(p) || now.Sub(e.Used) < grace {
			continue
		}
		r, err := evict(p, now.Add(-grace))
		if err != nil {
			return res, err
		}
		switch r {
		case evicted:
			res.Removed = append(res.Removed, e)
			res.RemovedBytes += e.Size
		case goneAlready: // another prune took it
			taken++
		default:
			continue
		}
		total -= e.Size
	}
	res.KeptBytes, res.Kept = total, len(entries)-len(res.Removed)-taken
	return res, nil
}

// clearLeftovers removes the temporary directories of fills and prunes
// that were interrupted before cutoff. A fill that is still running holds
// its directory locked, and stays.
func clearLeftovers(left []leftover, cutoff time.Time) error {
	for _, l := range left {
		if l.modified.After(cutoff) {
			continue // just made
		}
		lock, err := lockDir(l.path, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			continue // being filled, or already gone
		}
		err = os.RemoveAll(l.path)
		_ = lock.Close() // read only
		if err != nil {
			return fmt.Errorf("clear cache leftover %s: %w", filepath.Base(l.path), err)
		}
	}
	return nil
}

// What evict did with an entry.
type eviction int

const (
	stayed      eviction = iota // held by a build, or used since it was listed
	evicted                     // removed
	goneAlready                 // not there any more: another prune took it
)

// evict removes the entry at p if no build holds it and none used it
// after usedBefore.
func evict(p string, usedBefore time.Time) (eviction, error) {
	lock, err := lockDir(p, syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return goneAlready, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return stayed, nil
	case err != nil:
		return stayed, fmt.Errorf("evict %s: %w", p, err)
	}
	defer lock.Close() // read only
	if !stillAt(lock, p) {
		return goneAlready, nil
	}
	if fi, err := lock.Stat(); err != nil || fi.ModTime().After(usedBefore) {
		return stayed, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(p), evictPrefix)
	if err != nil {
		return stayed, fmt.Errorf("evict %s: %w", p, err)
	}
	if err := os.Rename(p, filepath.Join(tmp, filepath.Base(p))); err != nil {
		_ = os.Remove(tmp)
		return stayed, fmt.Errorf("evict %s: %w", p, err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return evicted, fmt.Errorf("evict %s: %w", p, err)
	}
	return evicted, nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return nil //nolint:nilerr // removed while we walked
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of cache entry %s: %w", dir, err)
	}
	return n, nil
}

func isHash(name string) bool {
	if len(name) != 64 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

// ParseMax reads a cache bound as $EnvMax spells it: a number of bytes
// with an optional unit (KiB, MiB, GiB, TiB, or K, M, G, T, all powers of
// 1024), or "off" for no bound (0 is returned). "" is DefaultMax.
func ParseMax(s string) (int64, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return DefaultMax, nil
	case "off":
		return 0, nil
	}
	units := []struct {
		suffix string
		shift  uint
	}{{"kib", 10}, {"mib", 20}, {"gib", 30}, {"tib", 40}, {"k", 10}, {"m", 20}, {"g", 30}, {"t", 40}, {"b", 0}}
	num, shift := strings.ToLower(s), uint(0)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, shift = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("%s=%q: want a size such as 20GiB, or off", EnvMax, s)
	}
	return n << shift, nil
}
