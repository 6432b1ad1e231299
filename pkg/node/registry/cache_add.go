package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
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

// AddLayout copies every named image of the OCI layout in dir (a
// side-loaded bundle) into the cache, verifying every manifest and blob it
// reads, and records the names. It returns the references added
// ("host/path:tag").
//
// The layout is untrusted: its files are read through an os.Root on dir,
// so no path or symlink leads out of it (ErrSideloadOutside); only regular
// files are read (ErrSideloadNotRegular); index.json, manifests and configs
// are capped, and a blob is never read past its descriptor's size
// (ErrSideloadTooLarge). A name:tag the slot's bundle holds (WithBundle)
// with another digest is refused (ErrShadowsBundle); with the same digest
// it is skipped. With SignedBy, index.json must carry a signature
// (layout.BundleIndexSignature) by one of the keys, checked on the very
// bytes that are then used (ErrSideloadUnsigned). On any error AddLayout
// removes the blobs it added, records nothing and returns an error naming
// the file.
func (c *Cache) AddLayout(ctx context.Context, dir string, opts ...AddOption) ([]string, error) {
	var o addOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkSideloadDir(dir); err != nil {
		return nil, err
	}
	ld, err := openLayoutDir(dir)
	if err != nil {
		return nil, err
	}
	defer ld.Close()
	idx, raw, err := readLayoutIndex(ld, sideloadIndexMax)
	if err != nil {
		return nil, err
	}
	if o.signed {
		if err := checkIndexSignature(ld, raw, o.keys); err != nil {
			return nil, err
		}
	}
	plan, err := c.planLayout(ctx, dir, idx)
	if err != nil {
		return nil, err
	}
	cp := c.newCopier(&layoutStore{dir: ld, cat: newCatalog()}, dir)
	cp.limits = copyLimits{manifest: sideloadManifestMax, config: sideloadConfigMax, tooLarge: ErrSideloadTooLarge}
	var recs []record
	var refs []string
	for _, p := range plan {
		raw, err := cp.manifest(ctx, p.desc)
		if err != nil {
			cp.rollback()
			return nil, fmt.Errorf("add layout %s: %w", dir, err)
		}
		for _, n := range p.names {
			recs = append(recs, record{repo: n.repo, tag: n.tag, desc: p.desc, raw: raw})
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

// layoutEntry is an index.json entry to copy, with the names to record.
type layoutEntry struct {
	desc  v1.Descriptor
	names []entryName
}

// planLayout lists what AddLayout copies: the named entries of idx, without
// the names the slot's bundle already holds with the same digest. A name
// the bundle holds with another digest refuses the whole layout.
func (c *Cache) planLayout(ctx context.Context, dir string, idx *v1.IndexManifest) ([]layoutEntry, error) {
	var plan []layoutEntry
	for _, e := range idx.Manifests {
		names := entryNames(e)
		if len(names) == 0 {
			c.log.Warn("registry: bundle entry has no name; skipped", "layout", dir, "digest", e.Digest)
			continue
		}
		var keep []entryName
		for _, n := range names {
			held, err := c.bundleHolds(ctx, n, e.Digest)
			if err != nil {
				return nil, fmt.Errorf("add layout %s: %w", dir, err)
			}
			if held {
				c.log.Info("registry: side-loaded tag is the slot's own; skipped", "layout", dir, "repository", n.repo, "tag", n.tag)
				continue
			}
			keep = append(keep, n)
		}
		if len(keep) > 0 {
			plan = append(plan, layoutEntry{desc: e, names: keep})
		}
	}
	return plan, nil
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
}

// copier copies a manifest graph from a Store into the cache.
type copier struct {
	c       *Cache
	src     Store
	srcDir  string // for error messages, if src is a layout
	limits  copyLimits
	done    map[v1.Hash]bool
	created []v1.Hash
}

func (c *Cache) newCopier(src Store, srcDir string) *copier {
	// A store's content is bounded by what it says, and by the size of
	// a manifest read into memory; AddLayout sets side-load limits.
	limits := copyLimits{manifest: maxManifestSize, config: -1, tooLarge: ErrDigestMismatch}
	return &copier{c: c, src: src, srcDir: srcDir, limits: limits, done: map[v1.Hash]bool{}}
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
	limit := cp.limits.manifest
	if desc.Size > limit {
		return nil, fmt.Errorf("%s: manifest of %d bytes, more than %d: %w", cp.where(desc.Digest), desc.Size, limit, cp.limits.tooLarge)
	}
	content, err := cp.src.Open(ctx, desc.Digest)
	if err != nil {
		return nil, cp.openError(desc.Digest, err)
	}
	if content.Size > limit {
		content.Close()
		return nil, fmt.Errorf("%s: manifest of %d bytes, more than %d: %w", cp.where(desc.Digest), content.Size, limit, cp.limits.tooLarge)
	}
	raw, err := io.ReadAll(io.LimitReader(content.Body, limit+1))
	content.Close()
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
				err = cp.blob(ctx, child, -1)
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

// AddOption is an option of AddLayout.
type AddOption func(*addOptions)

type addOptions struct {
	signed bool
	keys   []signature.PublicKey
}

// SignedBy makes AddLayout take only a layout whose index.json is signed
// by one of keys (none: nothing is taken).
func SignedBy(keys []signature.PublicKey) AddOption {
	return func(o *addOptions) { o.signed, o.keys = true, keys }
}

// checkIndexSignature checks index, the bytes of index.json, against its
// signature file in the layout.
func checkIndexSignature(ld *layoutDir, index []byte, keys []signature.PublicKey) error {
	sig, err := ld.readFile(layout.BundleIndexSignature, signature.MaxFileSize)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: no %s: %w", ld.path("index.json"), layout.BundleIndexSignature, ErrSideloadUnsigned)
	}
	if err != nil {
		return err
	}
	if _, err := signature.VerifyFor(signature.PurposeBundle, sig, index, keys); err != nil {
		return fmt.Errorf("%s: %w: %w", ld.path(layout.BundleIndexSignature), err, ErrSideloadUnsigned)
	}
	return nil
}
