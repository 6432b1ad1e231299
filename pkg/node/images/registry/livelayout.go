package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// liveLayout serves an OCI image layout that another process adds to
// while the registry runs (the node's upgrade share): it opens the layout
// again whenever its index.json was replaced. The writer replaces
// index.json atomically after the blobs it names are in place, or are
// being written under their growing names (GrowingPrefix), which it
// serves as they grow: each opening sees a layout whose every blob can
// be read. A missing layout is an empty store.
type liveLayout struct {
	dir  string
	opts []Option

	mu      sync.RWMutex
	current Store // nil while there is no layout
	seen    indexStamp
}

// indexStamp tells one index.json from the next.
type indexStamp struct {
	ino     uint64
	size    int64
	modTime time.Time
}

var (
	_ Store          = (*liveLayout)(nil)
	_ Lister         = (*liveLayout)(nil)
	_ ManifestLister = (*liveLayout)(nil)
)

// retireAfter is how long a replaced layout's root stays open for the
// requests that took it before the replacement.
const retireAfter = time.Minute

// OpenLiveLayout serves the OCI layout in dir, read again each time its
// index.json is replaced; until there is one, it holds nothing.
func OpenLiveLayout(dir string, opts ...Option) Store {
	return &liveLayout{dir: dir, opts: opts}
}

// store is the layout as its index.json now is.
func (l *liveLayout) store() (Store, error) {
	stamp, err := stampOf(filepath.Join(l.dir, "index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.mu.RLock()
	cur, same := l.current, stamp == l.seen
	l.mu.RUnlock()
	if same && cur != nil {
		return cur, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if stamp == l.seen && l.current != nil {
		return l.current, nil
	}
	s, err := OpenLayout(l.dir, l.opts...)
	if err != nil {
		return nil, err
	}
	if old, ok := l.current.(*layoutStore); ok {
		// A request may still be reading through the old root: it is
		// closed once such a request is long done (files opened from it
		// stay readable in any case).
		time.AfterFunc(retireAfter, func() { _ = old.dir.Close() }) // a directory, read only
	}
	l.current, l.seen = s, stamp
	return s, nil
}

// Resolve implements Store.
func (l *liveLayout) Resolve(ctx context.Context, repo, reference string) (v1.Descriptor, error) {
	s, err := l.store()
	if err != nil {
		return v1.Descriptor{}, err
	}
	if s == nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", repo, ErrNotFound)
	}
	return s.Resolve(ctx, repo, reference)
}

// Open implements Store.
func (l *liveLayout) Open(ctx context.Context, d v1.Hash) (*Content, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	c, err := s.Open(ctx, d)
	if ls, ok := s.(*layoutStore); ok && errors.Is(err, ErrNotFound) {
		// A blob its writer is still writing (GrowingPrefix).
		if g, gerr := openGrowing(ctx, ls.dir, d); gerr == nil {
			return g, nil
		}
	}
	return c, err
}

// Repositories implements Lister.
func (l *liveLayout) Repositories(ctx context.Context) ([]string, error) {
	s, err := l.store()
	if s == nil || err != nil {
		return nil, err
	}
	return s.(Lister).Repositories(ctx)
}

// Tags implements Lister.
func (l *liveLayout) Tags(ctx context.Context, repo string) ([]string, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%s: %w", repo, ErrNotFound)
	}
	return s.(Lister).Tags(ctx, repo)
}

// Manifests implements ManifestLister.
func (l *liveLayout) Manifests(ctx context.Context, repo string) ([]v1.Descriptor, error) {
	s, err := l.store()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%s: %w", repo, ErrNotFound)
	}
	return s.(ManifestLister).Manifests(ctx, repo)
}

// String names the store in logs.
func (l *liveLayout) String() string { return "live layout " + l.dir }
