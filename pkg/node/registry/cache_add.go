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
func (c *Cache) Add(ctx context.Context, src Store, repo, reference string) (v1.Descriptor, error) {
	desc, err := src.Resolve(ctx, repo, reference)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("add %s: %w", repo, err)
	}
	cp := c.newCopier(src, "")
	raw, err := cp.manifest(ctx, desc)
	if err != nil {
		cp.rollback()
		return v1.Descriptor{}, fmt.Errorf("add %s %s: %w", repo, reference, err)
	}
	tag := reference
	if isDigestRef(reference) {
		tag = ""
	}
	if err := c.record(record{repo: repo, tag: tag, desc: desc, raw: raw}); err != nil {
		cp.rollback()
		return v1.Descriptor{}, fmt.Errorf("add %s %s: %w", repo, reference, err)
	}
	return stripDescriptor(desc), nil
}

// AddLayout copies every named image of the OCI layout in dir (a
// side-loaded bundle) into the cache, verifying every manifest and blob it
// reads, and records the names. If anything is missing or corrupt it returns
// an error naming the blob, removes the blobs it added and records nothing.
// It returns the references added ("host/path:tag").
func (c *Cache) AddLayout(ctx context.Context, dir string) ([]string, error) {
	idx, err := readLayoutIndex(dir)
	if err != nil {
		return nil, err
	}
	src := &layoutStore{dir: dir, cat: newCatalog()}
	cp := c.newCopier(src, dir)
	var recs []record
	var refs []string
	for _, e := range idx.Manifests {
		names := entryNames(e)
		if len(names) == 0 {
			c.log.Warn("registry: bundle entry has no name; skipped", "layout", dir, "digest", e.Digest)
			continue
		}
		raw, err := cp.manifest(ctx, e)
		if err != nil {
			cp.rollback()
			return nil, fmt.Errorf("add layout %s: %w", dir, err)
		}
		for _, n := range names {
			recs = append(recs, record{repo: n.repo, tag: n.tag, desc: e, raw: raw})
			if n.tag != "" {
				refs = append(refs, n.repo+":"+n.tag)
			}
		}
	}
	if err := c.record(recs...); err != nil {
		cp.rollback()
		return nil, fmt.Errorf("add layout %s: %w", dir, err)
	}
	return refs, nil
}

// copier copies a manifest graph from a Store into the cache.
type copier struct {
	c       *Cache
	src     Store
	srcDir  string // for error messages, if src is a layout
	done    map[v1.Hash]bool
	created []v1.Hash
}

func (c *Cache) newCopier(src Store, srcDir string) *copier {
	return &copier{c: c, src: src, srcDir: srcDir, done: map[v1.Hash]bool{}}
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

// manifest copies a manifest and everything it references, and returns its
// content.
func (cp *copier) manifest(ctx context.Context, desc v1.Descriptor) ([]byte, error) {
	content, err := cp.src.Open(ctx, desc.Digest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cp.where(desc.Digest), err)
	}
	raw, err := io.ReadAll(io.LimitReader(content.Body, maxManifestSize+1))
	content.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cp.where(desc.Digest), err)
	}
	if err := matchDigest(bytes.NewReader(raw), desc.Digest); err != nil {
		return nil, fmt.Errorf("%s: %w", cp.where(desc.Digest), err)
	}
	if cp.done[desc.Digest] {
		return raw, nil
	}
	mt := desc.MediaType
	if mt == "" {
		mt = sniffMediaType(raw)
	}
	switch {
	case mt.IsIndex():
		var idx v1.IndexManifest
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("parse index %s: %w", desc.Digest, err)
		}
		for _, child := range idx.Manifests {
			if isManifestType(child.MediaType) {
				_, err = cp.manifest(ctx, child)
			} else {
				err = cp.blob(ctx, child)
			}
			if err != nil {
				return nil, err
			}
		}
	case mt.IsImage():
		var m v1.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("parse manifest %s: %w", desc.Digest, err)
		}
		if err := cp.blob(ctx, m.Config); err != nil {
			return nil, err
		}
		for _, l := range m.Layers {
			err := cp.blob(ctx, l)
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
	if err := cp.put(ctx, desc.Digest, int64(len(raw)), bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return raw, nil
}

// blob copies one blob unless the cache has it.
func (cp *copier) blob(ctx context.Context, desc v1.Descriptor) error {
	if cp.done[desc.Digest] || cp.c.present(desc.Digest, desc.Size) {
		return nil
	}
	content, err := cp.src.Open(ctx, desc.Digest)
	if err != nil {
		return fmt.Errorf("%s: %w", cp.where(desc.Digest), err)
	}
	defer content.Close()
	if content.Size != desc.Size {
		return fmt.Errorf("%s: size %d, want %d: %w", cp.where(desc.Digest), content.Size, desc.Size, ErrDigestMismatch)
	}
	return cp.put(ctx, desc.Digest, desc.Size, content.Body)
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
