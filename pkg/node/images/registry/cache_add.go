package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Add copies the manifest that src resolves for repo and reference (a tag
// or a digest), with everything it references, into the cache, and records
// it under repo (and the tag). Every manifest and blob read from src is
// verified against its digest; blobs the cache already holds are not read.
// A tag the slot's bundle (WithBundle) holds with another digest is refused
// (ErrShadowsBundle).
func (c *Cache) Add(ctx context.Context, src Store, repo, reference string) (v1.Descriptor, error) {
	desc, err := src.Resolve(ctx, repo, reference)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("add %s: %w", repo, err)
	}
	tag := reference
	if isDigestRef(reference) {
		tag = ""
	}
	if _, err := c.bundleHolds(ctx, entryName{repo: repo, tag: tag}, desc.Digest); err != nil {
		return v1.Descriptor{}, fmt.Errorf("add %s: %w", repo, err)
	}
	cp := c.newCopier(src, "")
	raw, err := cp.manifest(ctx, desc)
	if err != nil {
		cp.rollback()
		return v1.Descriptor{}, fmt.Errorf("add %s %s: %w", repo, reference, err)
	}
	if err := c.record(record{repo: repo, tag: tag, desc: desc, raw: raw}); err != nil {
		cp.rollback()
		return v1.Descriptor{}, fmt.Errorf("add %s %s: %w", repo, reference, err)
	}
	return stripDescriptor(desc), nil
}

// bundleHolds reports whether the slot's bundle holds n with digest d; it
// returns an error matching ErrShadowsBundle if it holds n with another.
// Names without a tag shadow nothing (a digest names its content).
func (c *Cache) bundleHolds(ctx context.Context, n entryName, d v1.Hash) (bool, error) {
	if c.bundle == nil || n.tag == "" {
		return false, nil
	}
	desc, err := c.bundle.Resolve(ctx, n.repo, n.tag)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up %s:%s in the slot's bundle: %w", n.repo, n.tag, err)
	case desc.Digest != d:
		return false, fmt.Errorf("%s:%s is %s in the slot's bundle, the side-load has %s: %w",
			n.repo, n.tag, desc.Digest, d, ErrShadowsBundle)
	}
	return true, nil
}

// copyLimits bound what a copier reads from its source.
type copyLimits struct {
	manifest int64 // bytes of a manifest (read into memory)
	config   int64 // bytes of an image config; -1: its descriptor's size
	// tooLarge is wrapped by the errors for content over a limit, or
	// larger than its descriptor says.
	tooLarge error
	// depth bounds how deep image indexes nest (1: the manifest copied
	// is an index of images); 0: any depth. Deeper is ErrSideloadTooDeep.
	depth int
}

// copier copies a manifest graph from a Store into the cache. A copier
// that measures (measure) reads and checks the manifests as a copy
// would, but writes nothing: it adds up in need the bytes of what the
// cache lacks.
type copier struct {
	c      *Cache
	src    Store
	srcDir string // for error messages, if src is a layout
	limits copyLimits
	done   map[v1.Hash]bool
	// heights holds, for each index done, how many levels of indexes it
	// is (1: an index of images).
	heights map[v1.Hash]int
	created []v1.Hash
	measure bool
	need    uint64
}

func (c *Cache) newCopier(src Store, srcDir string) *copier {
	// A store's content is bounded by what it says, and by the size of
	// a manifest read into memory; AddLayout sets side-load limits.
	limits := copyLimits{manifest: maxManifestSize, config: -1, tooLarge: ErrDigestMismatch}
	return &copier{c: c, src: src, srcDir: srcDir, limits: limits, done: map[v1.Hash]bool{}, heights: map[v1.Hash]int{}}
}

// rollback removes the blobs this copier created.
func (cp *copier) rollback() {
	for _, d := range cp.created {
		if err := cp.c.remove(d); err != nil {
			cp.c.log.Warn("registry: rollback", "err", err)
		}
	}
	cp.created = nil
}

// where names a blob for an error message.
func (cp *copier) where(d v1.Hash) string {
	if cp.srcDir == "" {
		return "blob " + d.String()
	}
	p, err := blobPath(cp.srcDir, d)
	if err != nil {
		return "blob " + d.String()
	}
	return fmt.Sprintf("blob %s (%s)", d, p)
}

// openError wraps an error opening d from the source; a layout's errors
// name the file already.
func (cp *copier) openError(d v1.Hash, err error) error {
	if cp.srcDir != "" {
		return fmt.Errorf("blob %s: %w", d, err)
	}
	return fmt.Errorf("%s: %w", cp.where(d), err)
}

// manifest copies a manifest and everything it references, and returns its
// content.
func (cp *copier) manifest(ctx context.Context, desc v1.Descriptor) ([]byte, error) {
	return cp.manifestAt(ctx, desc, 1)
}

// manifestAt is manifest for a manifest depth levels down: 1 for the one
// named, 2 for a manifest its index lists, and so on.
func (cp *copier) manifestAt(ctx context.Context, desc v1.Descriptor, depth int) ([]byte, error) {
	limit := cp.limits.manifest
	if desc.Size > limit {
		return nil, fmt.Errorf("%s: manifest of %d bytes, more than %d: %w", cp.where(desc.Digest), desc.Size, limit, cp.limits.tooLarge)
	}
	content, err := cp.src.Open(ctx, desc.Digest)
	if err != nil {
		return nil, cp.openError(desc.Digest, err)
	}
	if content.Size > limit {
		_ = content.Close() // read only
		return nil, fmt.Errorf("%s: manifest of %d bytes, more than %d: %w", cp.where(desc.Digest), content.Size, limit, cp.limits.tooLarge)
	}
	raw, err := io.ReadAll(io.LimitReader(content.Body, limit+1))
	_ = content.Close() // read only, and read whole: err says whether it was
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cp.where(desc.Digest), err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: manifest of more than %d bytes: %w", cp.where(desc.Digest), limit, cp.limits.tooLarge)
	}
	if err := matchDigest(bytes.NewReader(raw), desc.Digest); err != nil {
		return nil, fmt.Errorf("%s: %w", cp.where(desc.Digest), err)
	}
	if cp.done[desc.Digest] {
		// Seen before, higher up perhaps: what it holds is as deep as then.
		if deepest := depth - 1 + cp.heights[desc.Digest]; cp.limits.depth > 0 && deepest > cp.limits.depth {
			return nil, fmt.Errorf("%s: holds an image index %d levels down, more than %d: %w",
				cp.where(desc.Digest), deepest, cp.limits.depth, ErrSideloadTooDeep)
		}
		return raw, nil
	}
	mt := desc.MediaType
	if mt == "" {
		mt = sniffMediaType(raw)
	}
	switch {
	case mt.IsIndex():
		if cp.limits.depth > 0 && depth > cp.limits.depth {
			return nil, fmt.Errorf("%s: an image index %d levels down, more than %d: %w",
				cp.where(desc.Digest), depth, cp.limits.depth, ErrSideloadTooDeep)
		}
		var idx v1.IndexManifest
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("parse index %s: %w", desc.Digest, err)
		}
		height := 1
		for _, child := range idx.Manifests {
			if isManifestType(child.MediaType) {
				_, err = cp.manifestAt(ctx, child, depth+1)
				height = max(height, 1+cp.heights[child.Digest])
			} else {
				err = cp.blob(ctx, child, -1)
			}
			if err != nil {
				return nil, err
			}
		}
		cp.heights[desc.Digest] = height
	case mt.IsImage():
		var m v1.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("parse manifest %s: %w", desc.Digest, err)
		}
		if err := cp.blob(ctx, m.Config, cp.limits.config); err != nil {
			return nil, err
		}
		for _, l := range m.Layers {
			err := cp.blob(ctx, l, -1)
			if errors.Is(err, ErrNotFound) && len(l.URLs) > 0 {
				continue // a foreign layer, fetched from its URLs
			}
			if err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%s: unsupported manifest media type %q", cp.where(desc.Digest), mt)
	}
	if cp.measure {
		cp.count(desc.Digest, int64(len(raw)))
		return raw, nil
	}
	if err := cp.put(ctx, desc.Digest, int64(len(raw)), bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return raw, nil
}

// blob copies one blob of at most limit bytes (-1: any) unless the cache
// has it. It never reads past the blob's descriptor's size.
func (cp *copier) blob(ctx context.Context, desc v1.Descriptor, limit int64) error {
	if limit >= 0 && desc.Size > limit {
		return fmt.Errorf("%s: %d bytes, more than %d: %w", cp.where(desc.Digest), desc.Size, limit, cp.limits.tooLarge)
	}
	if cp.done[desc.Digest] || cp.c.present(desc.Digest, desc.Size) {
		return nil
	}
	if cp.measure {
		cp.count(desc.Digest, desc.Size)
		return nil
	}
	content, err := cp.src.Open(ctx, desc.Digest)
	if err != nil {
		return cp.openError(desc.Digest, err)
	}
	defer content.Close()
	switch {
	case content.Size > desc.Size:
		return fmt.Errorf("%s: %d bytes, its descriptor says %d: %w", cp.where(desc.Digest), content.Size, desc.Size, cp.limits.tooLarge)
	case content.Size != desc.Size:
		return fmt.Errorf("%s: size %d, want %d: %w", cp.where(desc.Digest), content.Size, desc.Size, ErrDigestMismatch)
	}
	return cp.put(ctx, desc.Digest, desc.Size, content.Body)
}

// count adds a blob of size bytes to what a measuring copier needs,
// unless the cache has it.
func (cp *copier) count(d v1.Hash, size int64) {
	if !cp.done[d] && size > 0 && !cp.c.present(d, size) {
		cp.need += uint64(size)
	}
	cp.done[d] = true
}

func (cp *copier) put(ctx context.Context, d v1.Hash, size int64, r io.Reader) error {
	created, err := cp.c.put(ctx, d, size, r)
	if created {
		cp.created = append(cp.created, d)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cp.where(d), err)
	}
	cp.done[d] = true
	return nil
}
