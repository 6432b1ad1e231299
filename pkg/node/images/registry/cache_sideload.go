package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// sideloadMaxDepth bounds how deep a side-load's image indexes nest: an
// index of images is 1, an index of such indexes 2. Real bundles use 1;
// a deeper chain is refused (ErrSideloadTooDeep) before it is walked
// further.
const sideloadMaxDepth = 4

// Sideloaded is what Cache.Sideload did.
type Sideloaded struct {
	// Added are the references recorded ("host/path:tag"), in the
	// layout's order; a tag the cache held with the same digest is among
	// them, and so are the replaced ones.
	Added []string
	// Replaced are the tags the layout moved to another digest: it is
	// signed (SignedBy) and its index.json says it replaces them
	// (layout.BundleReplacesAnnotation).
	Replaced []ReplacedTag
	// Signed says index.json's bundle signature was checked (SignedBy),
	// and Signer is the trusted key that made it.
	Signed bool
	Signer signature.PublicKey
	// Bytes is what the cache lacked and the side-load wrote.
	Bytes uint64
}

// ReplacedTag is a tag a signed side-load moved to another image.
type ReplacedTag struct {
	Ref string  `json:"ref"` // "host/path:tag"
	Old v1.Hash `json:"old"`
	New v1.Hash `json:"new"`
	// Generation is the bundle's (layout.BundleGenerationAnnotation),
	// now the highest the node applied to the tag.
	Generation uint64 `json:"generation,omitempty"`
}

// AddOption is an option of Sideload (and AddLayout).
type AddOption func(*addOptions)

type addOptions struct {
	signed  bool
	keys    []signature.PublicKey
	space   diskspace.FS
	reserve uint64
}

// SignedBy makes Sideload take only a layout whose index.json is signed
// for bundles by one of keys (none: nothing is taken). Only such a layout
// may replace a tag the cache has.
func SignedBy(keys []signature.PublicKey) AddOption {
	return func(o *addOptions) { o.signed, o.keys = true, keys }
}

// WithSpace makes Sideload ask fs for the cache's free space (nil: the
// kernel's, which is also the default) and keep reserve bytes of it
// free: a layout needing more is refused before anything is written
// (diskspace.ErrNoSpace).
func WithSpace(fs diskspace.FS, reserve uint64) AddOption {
	return func(o *addOptions) { o.space, o.reserve = fs, reserve }
}

// AddLayout is Sideload, returning the references it added.
func (c *Cache) AddLayout(ctx context.Context, dir string, opts ...AddOption) ([]string, error) {
	res, err := c.Sideload(ctx, dir, opts...)
	return res.Added, err
}

// Sideload copies every named image of the OCI layout in dir (a
// side-loaded bundle) into the cache, verifying every manifest and blob it
// reads, and records the names.
//
// The layout is untrusted: its files are read through an os.Root on dir,
// so no path or symlink leads out of it (ErrSideloadOutside); only regular
// files are read (ErrSideloadNotRegular); index.json, manifests and configs
// are capped, and a blob is never read past its descriptor's size
// (ErrSideloadTooLarge); image indexes nest at most sideloadMaxDepth deep
// (ErrSideloadTooDeep).
//
// What it may name: a name:tag the slot's bundle holds (WithBundle) with
// another digest is refused (ErrShadowsBundle); with the same digest it is
// skipped. A name:tag the cache holds with another digest is refused
// (ErrSideloadMovesTag), unless the layout is signed (SignedBy) and its
// index.json entry says it replaces it (layout.BundleReplacesAnnotation
// "true") with a generation (layout.BundleGenerationAnnotation) above the
// last one the node applied to that tag (ErrSideloadReplayed otherwise):
// then the tag moves, the generation is recorded (tagGenerationsFile), and
// Sideloaded.Replaced names the old digest. With SignedBy, index.json must
// carry a bundle signature (layout.BundleIndexSignature) by one of the
// keys, checked on the very bytes that are then used (ErrSideloadUnsigned).
//
// Before it writes anything it reads every manifest and adds up what the
// cache lacks: more than the cache's file system has free beyond the
// reserve (WithSpace) is refused, with the sizes (diskspace.ErrNoSpace).
// On any error Sideload removes the blobs it added, records nothing and
// returns an error naming the file or the image.
func (c *Cache) Sideload(ctx context.Context, dir string, opts ...AddOption) (Sideloaded, error) {
	var o addOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkSideloadDir(dir); err != nil {
		return Sideloaded{}, err
	}
	ld, err := openLayoutDir(dir)
	if err != nil {
		return Sideloaded{}, err
	}
	defer ld.Close()
	idx, raw, err := readLayoutIndex(ld, sideloadIndexMax)
	if err != nil {
		return Sideloaded{}, err
	}
	var res Sideloaded
	if o.signed {
		if res.Signer, err = checkIndexSignature(ld, raw, o.keys); err != nil {
			return Sideloaded{}, err
		}
		res.Signed = true
	}
	// One side-load at a time: its generations are checked, then
	// recorded, with no other in between.
	c.sideloadMu.Lock()
	defer c.sideloadMu.Unlock()
	plan, err := c.planLayout(ctx, dir, idx, res.Signed)
	if err != nil {
		return Sideloaded{}, err
	}
	applied, generations, err := c.planGenerations(dir, plan, res.Signed)
	if err != nil {
		return Sideloaded{}, err
	}
	src := &layoutStore{dir: ld, cat: newCatalog()}
	limits := copyLimits{manifest: sideloadManifestMax, config: sideloadConfigMax, tooLarge: ErrSideloadTooLarge, depth: sideloadMaxDepth}

	// Every manifest is read and checked, and what the cache lacks is
	// added up, before anything is written.
	m := c.newCopier(src, dir)
	m.limits, m.measure = limits, true
	for _, p := range plan {
		if _, err := m.manifest(ctx, p.desc); err != nil {
			return Sideloaded{}, fmt.Errorf("add layout %s: %s: %w", dir, p.name(), err)
		}
	}
	err = diskspace.Check(o.space, diskspace.Need{
		What: fmt.Sprintf("the side-load of %d images", len(plan)), Path: c.dir, Bytes: m.need, Reserve: o.reserve,
		Fix: "free space on the node (images it no longer runs), or side-load fewer images at a time",
	})
	if err != nil {
		return Sideloaded{}, fmt.Errorf("add layout %s: %w", dir, err)
	}
	res.Bytes = m.need

	cp := c.newCopier(src, dir)
	cp.limits = limits
	var recs []record
	for _, p := range plan {
		raw, err := cp.manifest(ctx, p.desc)
		if err != nil {
			cp.rollback()
			return Sideloaded{}, fmt.Errorf("add layout %s: %s: %w", dir, p.name(), err)
		}
		for _, n := range p.names {
			recs = append(recs, record{repo: n.repo, tag: n.tag, desc: p.desc, raw: raw, ifWas: &n.was})
			if n.tag == "" {
				continue
			}
			res.Added = append(res.Added, n.ref())
			if n.was != (v1.Hash{}) && n.was != p.desc.Digest {
				gen, _ := parseGeneration(p.desc.Annotations[layout.BundleGenerationAnnotation])
				res.Replaced = append(res.Replaced, ReplacedTag{Ref: n.ref(), Old: n.was, New: p.desc.Digest, Generation: gen})
			}
		}
	}
	undo, err := c.recordGenerations(applied, generations)
	if err != nil {
		cp.rollback()
		return Sideloaded{}, fmt.Errorf("add layout %s: %w", dir, err)
	}
	if err := c.record(recs...); err != nil {
		undo()
		cp.rollback()
		return Sideloaded{}, fmt.Errorf("add layout %s: %w", dir, err)
	}
	for _, r := range res.Replaced {
		c.log.Info("registry: a signed side-load replaced a tag", "layout", dir, "ref", r.Ref, "old", r.Old, "new", r.New, "signer", res.Signer.ID())
	}
	return res, nil
}

// layoutEntry is an index.json entry to copy, with the names to record.
type layoutEntry struct {
	desc  v1.Descriptor
	names []plannedName
}

// name names the entry in messages.
func (e layoutEntry) name() string {
	if len(e.names) == 0 {
		return e.desc.Digest.String()
	}
	return e.names[0].ref()
}

// plannedName is a name to record, with the digest the cache had it with
// when the side-load was planned (zero: none).
type plannedName struct {
	entryName
	was v1.Hash
}

func (n entryName) ref() string {
	if n.tag == "" {
		return n.repo
	}
	return n.repo + ":" + n.tag
}

// planLayout lists what Sideload copies: the named entries of idx, without
// the names the slot's bundle already holds with the same digest. A name
// the bundle holds with another digest refuses the whole layout, and so
// does a tag the cache holds with another digest unless the layout is
// signed and its entry says it replaces it.
func (c *Cache) planLayout(ctx context.Context, dir string, idx *v1.IndexManifest, signed bool) ([]layoutEntry, error) {
	var plan []layoutEntry
	var moves []string      // "ref is old on this node and new in the bundle"
	var markedUnsigned bool // a move the layout marks replaced, unsigned
	seen := map[entryName]v1.Hash{}
	for _, e := range idx.Manifests {
		names := entryNames(e)
		if len(names) == 0 {
			c.log.Warn("registry: bundle entry has no name; skipped", "layout", dir, "digest", e.Digest)
			continue
		}
		replaces := e.Annotations[layout.BundleReplacesAnnotation] == "true"
		var keep []plannedName
		for _, n := range names {
			if d, dup := seen[n]; dup && n.tag != "" && d != e.Digest {
				return nil, fmt.Errorf("add layout %s: index.json names %s twice, as %s and as %s; a name:tag is one image: write the disk again with 'imagebuild bundle disk'",
					dir, n.ref(), d, e.Digest)
			}
			seen[n] = e.Digest
			held, err := c.bundleHolds(ctx, n, e.Digest)
			if err != nil {
				return nil, fmt.Errorf("add layout %s: %w", dir, err)
			}
			if held {
				c.log.Info("registry: side-loaded tag is the slot's own; skipped", "layout", dir, "repository", n.repo, "tag", n.tag)
				continue
			}
			p := plannedName{entryName: n}
			if n.tag != "" {
				p.was = c.tagDigest(n.repo, n.tag)
			}
			if p.was != (v1.Hash{}) && p.was != e.Digest && !(signed && replaces) {
				moves = append(moves, fmt.Sprintf("%s is %s on this node and %s in the bundle", n.ref(), p.was, e.Digest))
				markedUnsigned = markedUnsigned || replaces
			}
			keep = append(keep, p)
		}
		if len(keep) > 0 {
			plan = append(plan, layoutEntry{desc: e, names: keep})
		}
	}
	if len(moves) > 0 {
		return nil, fmt.Errorf("add layout %s: %s: %w; %s", dir, strings.Join(moves, ", "), ErrSideloadMovesTag, moveFix(signed, markedUnsigned))
	}
	return plan, nil
}

// moveFix is what to do about a refused tag move.
func moveFix(signed, markedUnsigned bool) string {
	if signed {
		return "give the new image another tag, or mark the tag replaced in the bundle: " +
			"imagebuild bundle disk --sign KEY --replace-tags REPOSITORY:TAG --generation N"
	}
	fix := "give the new image another tag; only a bundle signed by a key this node trusts for bundles may replace a tag, " +
		"and this node takes bundles unsigned because it trusts no key: add one to its trustedKeys with purposes: [bundle], " +
		"then side-load 'imagebuild bundle disk --sign KEY --replace-tags REPOSITORY:TAG --generation N'"
	if markedUnsigned {
		fix = "the bundle marks it replaced (" + layout.BundleReplacesAnnotation + "), which counts only in a signed bundle; " + fix
	}
	return fix
}

// checkIndexSignature checks index, the bytes of index.json, against its
// signature file in the layout, and returns the key that made it.
func checkIndexSignature(ld *layoutDir, index []byte, keys []signature.PublicKey) (signature.PublicKey, error) {
	sig, err := ld.readFile(layout.BundleIndexSignature, signature.MaxFileSize)
	if errors.Is(err, ErrNotFound) {
		return signature.PublicKey{}, fmt.Errorf("%s: unsigned (no %s beside it): %w; %s",
			ld.path("index.json"), layout.BundleIndexSignature, ErrSideloadUnsigned, signFix(keys))
	}
	if err != nil {
		return signature.PublicKey{}, err
	}
	signer, err := signature.VerifyFor(signature.PurposeBundle, sig, index, keys)
	if err == nil {
		return signer, nil
	}
	var what string
	switch {
	case errors.Is(err, signature.ErrUnknownKey):
		k, _ := signature.Signer(sig)
		what = fmt.Sprintf("signed by key %s (%s), which this node does not trust for bundles", k.ID(), k)
	case errors.Is(err, signature.ErrBadSignature):
		what = "the signature is not a bundle signature of this index.json " +
			"(made for another index.json, or for something else such as a config, or index.json changed after signing)"
	default:
		what = "not a signature file imagebuild writes (cut short or edited)"
	}
	return signature.PublicKey{}, &refusal{
		msg: fmt.Sprintf("%s: %s: %s; %s", ld.path(layout.BundleIndexSignature), what, ErrSideloadUnsigned, signFix(keys)),
		is:  []error{ErrSideloadUnsigned, err},
	}
}

// signFix is what to do about a bundle refused as unsigned.
func signFix(keys []signature.PublicKey) string {
	if len(keys) == 0 {
		return "this node trusts no key for bundles: list a key in its trustedKeys with purposes: [bundle] " +
			"(a key trusted for configs only does not sign bundles), and write the disk with 'imagebuild bundle disk --sign KEY'"
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID()
	}
	return fmt.Sprintf("write the disk with 'imagebuild bundle disk --sign KEY', KEY one this node trusts for bundles (%s)", strings.Join(ids, ", "))
}

// refusal is an error with a message of its own that matches (errors.Is,
// errors.As) each of the errors it stands for.
type refusal struct {
	msg string
	is  []error
}

func (r *refusal) Error() string   { return r.msg }
func (r *refusal) Unwrap() []error { return r.is }
