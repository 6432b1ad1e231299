package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
)

// Cache is a writable content store on disk. It is an OCI image layout, so
// standard tools can inspect it; it keeps temporary files in a ".tmp"
// directory inside the layout. Blobs are written to a temporary file while
// their digest is checked, synced, and renamed into place, so a blob file
// that exists is complete. It is safe for concurrent use within a process,
// but a directory must be used by one process at a time (OpenCache removes
// leftover temporary files, and index.json is rewritten from memory).
type Cache struct {
	dir    string
	log    *slog.Logger
	bundle Store // the slot's bundle (WithBundle), or nil

	// sideloadMu makes side-loads one at a time (tagGenerationsFile).
	sideloadMu sync.Mutex

	mu      sync.RWMutex // guards entries and cat
	entries []v1.Descriptor
	cat     *catalog
}

var (
	_ Store          = (*Cache)(nil)
	_ Lister         = (*Cache)(nil)
	_ ManifestLister = (*Cache)(nil)
)

const layoutMarker = `{"imageLayoutVersion":"1.0.0"}`

// OpenCache opens the cache in dir, creating an empty OCI layout there if
// there is none.
func OpenCache(dir string, opts ...Option) (*Cache, error) {
	o, err := storeOptions(opts, "OpenCache")
	if err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, log: o.log, bundle: o.bundle, cat: newCatalog()}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("create cache %s: %w", dir, err)
	}
	if err := os.RemoveAll(c.tmpDir()); err != nil {
		return nil, fmt.Errorf("clean cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(c.tmpDir(), 0o755); err != nil {
		return nil, fmt.Errorf("create cache %s: %w", dir, err)
	}
	marker := filepath.Join(dir, "oci-layout")
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		if err := c.writeFile(marker, []byte(layoutMarker)); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); errors.Is(err, os.ErrNotExist) {
		if err := c.writeIndex(nil); err != nil {
			return nil, err
		}
	}
	idx, err := readCacheIndex(dir)
	if err != nil {
		return nil, err
	}
	c.entries = idx.Manifests
	for _, e := range c.entries {
		for _, n := range entryNames(e) {
			c.addToCatalog(c.cat, n.repo, n.tag, e, nil)
		}
	}
	return c, nil
}

func readCacheIndex(dir string) (*v1.IndexManifest, error) {
	l, err := openLayoutDir(dir)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	idx, _, err := readLayoutIndex(l, indexMax)
	return idx, err
}

// Dir is the directory holding the cache's OCI layout.
func (c *Cache) Dir() string { return c.dir }

func (c *Cache) tmpDir() string { return filepath.Join(c.dir, ".tmp") }

func (c *Cache) readManifest(h v1.Hash) ([]byte, error) {
	p, err := blobPath(c.dir, h)
	if err != nil {
		return nil, err
	}
	return readVerified(p, h)
}

// Resolve implements Store.
func (c *Cache) Resolve(_ context.Context, repo, reference string) (v1.Descriptor, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cat.resolve(repo, reference)
}

// Open implements Store.
func (c *Cache) Open(_ context.Context, digest v1.Hash) (*Content, error) {
	p, err := blobPath(c.dir, digest)
	if err != nil {
		return nil, err
	}
	return openFile(p)
}

// Repositories implements Lister.
func (c *Cache) Repositories(context.Context) ([]string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cat.repositories(), nil
}

// Tags implements Lister.
func (c *Cache) Tags(_ context.Context, repo string) ([]string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cat.tagsOf(repo)
}

// Manifests implements ManifestLister.
func (c *Cache) Manifests(_ context.Context, repo string) ([]v1.Descriptor, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cat.manifestsOf(repo)
}

// String names the store in logs.
func (c *Cache) String() string { return "cache " + c.dir }

// Has reports whether the blob with digest d is in the cache.
func (c *Cache) Has(d v1.Hash) bool { return c.present(d, -1) }

// present reports whether the blob is in the cache with the given size
// (-1: any).
func (c *Cache) present(d v1.Hash, size int64) bool {
	p, err := blobPath(c.dir, d)
	if err != nil {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && (size < 0 || fi.Size() == size)
}

// Put stores the blob (or manifest) desc from r. The content is written to
// a temporary file while its size and digest are checked, then synced and
// renamed into place; on any error nothing is left behind. A blob that is
// already present is not rewritten and r is not read.
func (c *Cache) Put(ctx context.Context, desc v1.Descriptor, r io.Reader) error {
	_, err := c.put(ctx, desc.Digest, desc.Size, r)
	return err
}

// put is Put with an optional size (-1: unknown); it reports whether it
// created the blob file.
func (c *Cache) put(ctx context.Context, d v1.Hash, size int64, r io.Reader) (bool, error) {
	path, err := blobPath(c.dir, d)
	if err != nil {
		return false, err
	}
	if c.present(d, size) {
		return false, nil
	}
	h, err := v1.Hasher(d.Algorithm)
	if err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	tmp, err := os.CreateTemp(c.tmpDir(), "blob-*")
	if err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	ok := false
	defer func() {
		if !ok {
			// The blob failed already: what is left of it goes.
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	var src io.Reader = ctxReader{ctx: ctx, r: r}
	if size >= 0 {
		src = io.LimitReader(src, size+1)
	}
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), src, make([]byte, hashBufSize))
	if err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	if size >= 0 && n != size {
		return false, fmt.Errorf("put %s: got %d bytes, want %d: %w", d, n, size, ErrDigestMismatch)
	}
	if err := compareSum(h, d); err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("put %s: %w", d, err)
	}
	// Replace syncs the verified file, renames it into place (it removes
	// it if that fails) and syncs the blob directory.
	ok = true
	if err := atomicfile.Replace(tmp.Name(), path); err != nil {
		return errors.Is(err, atomicfile.ErrNotDurable), fmt.Errorf("put %s: %w", d, err)
	}
	return true, nil
}

// remove deletes a blob, after it was found corrupt.
func (c *Cache) remove(d v1.Hash) error {
	p, err := blobPath(c.dir, d)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", d, err)
	}
	return nil
}

// record is one name to record in index.json.
type record struct {
	repo, tag string // an empty tag records the manifest by digest only
	desc      v1.Descriptor
	raw       []byte // desc's content if at hand, else nil
	// ifWas, when set, records the tag only if the cache has it now with
	// that digest (the zero Hash: not at all) or with desc's already: a
	// side-load's plan still holds when it is recorded.
	ifWas *v1.Hash
}

// record adds names to index.json (replacing an existing entry for the
// same repository and tag) and to the in-memory catalog. When a record's
// ifWas does not hold, nothing is recorded and the error matches
// ErrSideloadMovesTag.
func (c *Cache) record(recs ...record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		if r.ifWas == nil || r.tag == "" {
			continue
		}
		if now := c.cat.tags[r.repo][r.tag].Digest; now != *r.ifWas && now != r.desc.Digest {
			return fmt.Errorf("%s:%s changed to %s while it was copied (it was %s): %w",
				r.repo, r.tag, digestOrNone(now), digestOrNone(*r.ifWas), ErrSideloadMovesTag)
		}
	}
	entries := slices.Clone(c.entries)
	replaced := false
	for _, r := range recs {
		if r.tag == "" {
			if _, ok := c.cat.digests[r.repo][r.desc.Digest]; ok {
				continue
			}
			entries = append(entries, entryFor(r.desc, map[string]string{annotationRepository: r.repo}))
			continue
		}
		name := r.repo + ":" + r.tag
		n := len(entries)
		entries = slices.DeleteFunc(entries, func(e v1.Descriptor) bool {
			return slices.Contains(entryNames(e), entryName{repo: r.repo, tag: r.tag})
		})
		replaced = replaced || len(entries) != n
		entries = append(entries, entryFor(r.desc, map[string]string{
			annotationRefName:       name,
			annotationContainerdRef: name,
		}))
	}
	if err := c.writeIndex(entries); err != nil {
		return err
	}
	c.entries = entries
	raws := map[v1.Hash][]byte{}
	for _, r := range recs {
		raws[r.desc.Digest] = r.raw
	}
	if !replaced {
		for _, r := range recs {
			c.addToCatalog(c.cat, r.repo, r.tag, r.desc, r.raw)
		}
		return nil
	}
	// Rebuild, so the manifests of a replaced tag are dropped.
	cat := newCatalog()
	for _, e := range entries {
		for _, n := range entryNames(e) {
			c.addToCatalog(cat, n.repo, n.tag, e, raws[e.Digest])
		}
	}
	c.cat = cat
	return nil
}

// digestOrNone names a digest in a message; the zero Hash is "no image".
func digestOrNone(h v1.Hash) string {
	if h == (v1.Hash{}) {
		return "no image"
	}
	return h.String()
}

// tagDigest is the digest the cache holds repo:tag with; the zero Hash
// when it holds no such tag.
func (c *Cache) tagDigest(repo, tag string) v1.Hash {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cat.tags[repo][tag].Digest
}

func (c *Cache) addToCatalog(cat *catalog, repo, tag string, desc v1.Descriptor, raw []byte) {
	if err := cat.add(repo, tag, desc, raw, c.readManifest); err != nil {
		c.log.Warn("registry: cache entry is incomplete", "cache", c.dir, "repository", repo, "tag", tag, "err", err)
	}
}

func entryFor(d v1.Descriptor, annotations map[string]string) v1.Descriptor {
	e := stripDescriptor(d)
	e.Annotations = annotations
	return e
}

// writeIndex atomically replaces index.json.
func (c *Cache) writeIndex(entries []v1.Descriptor) error {
	if entries == nil {
		entries = []v1.Descriptor{}
	}
	raw, err := json.MarshalIndent(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     entries,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode index.json: %w", err)
	}
	return c.writeFile(filepath.Join(c.dir, "index.json"), raw)
}

// writeFile atomically replaces a small file in the layout. The temporary
// file is in tmpDir, so OpenCache removes it if the process dies first.
func (c *Cache) writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(c.tmpDir(), "file-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // err says why; OpenCache clears tmpDir of one that stays
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.Replace(tmp.Name(), path)
}
