// Package upgradeshare keeps the upgrade files a node accepted, or
// fetched from its peers, as OCI artifacts in an OCI image layout on
// TERRA-STATE (layout.UpgradesDir), which the node's registry serves to
// its peers: an upgrade put into one node reaches every other node
// through the cluster's own registries, over their mutual TLS.
//
// Each upgrade file is one artifact: an OCI image manifest of
// artifactType ArtifactType whose config is the empty descriptor and whose
// layers are the file's manifest.json, its manifest.json.sig and its
// parts, each part under the digest its signed manifest gives it. So a
// part is hashed once on its way in, against the signed manifest, and a
// peer fetches and checks each the same way; Open reads the upgrade file
// byte for byte from them (upgrade.Assemble), and the share never holds it
// twice. Its index.json entry names it layout.UpgradeRepository:<version>.
// The layout is written by one writer, firstboot: blobs first, each
// renamed into place whole, then index.json replaced atomically, so that
// a reader (the registry) and a power cut see the old layout or the new
// one.
package upgradeshare

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/readahead"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// Share is the layout in one directory.
type Share struct {
	dir     string
	space   diskspace.FS
	reserve uint64
}

// Option configures Open.
type Option func(*Share)

// WithSpace makes the share keep reserve bytes free on its file system
// (TERRA-STATE's reserve for etcd, machineconfig.Config.StateReserveBytes)
// when it writes an upgrade file, asking fs for the free space (nil: the
// kernel's, which is also the default, with no reserve).
func WithSpace(fs diskspace.FS, reserve uint64) Option {
	return func(s *Share) { s.space, s.reserve = fs, reserve }
}

// Open opens the share in dir, creating an empty layout there when there
// is none.
func Open(dir string, opts ...Option) (*Share, error) {
	s := &Share{dir: dir}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("open the upgrade share: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); errors.Is(err, os.ErrNotExist) {
		if err := atomicfile.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
			return nil, fmt.Errorf("open the upgrade share: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); errors.Is(err, os.ErrNotExist) {
		if err := s.writeIndex(nil); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Dir is the share's directory.
func (s *Share) Dir() string { return s.dir }

func (s *Share) blobPath(h v1.Hash) string {
	return filepath.Join(s.dir, "blobs", h.Algorithm, h.Hex)
}

// Add copies the parts of the upgrade v into the share, each checked as
// it is copied against the digest v's signed manifest gives it, with the
// signed manifest itself, and records the artifact. A part that differs
// is refused (ErrDigest, naming the part), and the share keeps nothing of
// v. Adding an upgrade the share holds already copies it again. An
// upgrade that would leave less than the reserve free (WithSpace) is
// refused before anything is written (diskspace.ErrNoSpace). Each tee
// is written a part's bytes as they are copied (Tee).
func (s *Share) Add(ctx context.Context, v *upgrade.Verified, tees ...Tee) (Artifact, error) {
	m := v.Manifest()
	manifest, sig := v.SignedManifest()
	layers := layersOf(m, manifest, sig)
	return s.add(m.Version, fileSize(layers), func() (Artifact, error) {
		if err := s.addLayers(ctx, v, layers, manifest, sig, tees, nil); err != nil {
			return Artifact{}, err
		}
		return s.record(layers, m.Version)
	})
}

// AddServing is Add that names the artifact before its last part (the
// part a tee takes, if any) is copied, and calls named with it: the
// node's registry serves that part to its peers as it is copied (a
// growing blob, registry.GrowingPrefix, there before named is called),
// each peer checking it as it does every blob, so that a rollout can
// start before the share holds the upgrade whole. When the copy then
// fails, the artifact is named no more and what was copied goes, as for
// Add; named's caller undoes what it started. Once the last part is in
// place, nothing more is written: the artifact named is the one kept.
func (s *Share) AddServing(ctx context.Context, v *upgrade.Verified, named func(Artifact) error, tees ...Tee) (Artifact, error) {
	m := v.Manifest()
	manifest, sig := v.SignedManifest()
	layers := layersOf(m, manifest, sig)
	var (
		early   Artifact
		isNamed bool
	)
	a, err := s.add(m.Version, fileSize(layers), func() (Artifact, error) {
		err := s.addLayers(ctx, v, layers, manifest, sig, tees, func() error {
			a, err := s.record(layers, m.Version)
			if err != nil {
				return err
			}
			early, isNamed = a, true
			return named(a)
		})
		switch {
		case err != nil:
			return Artifact{}, err
		case isNamed:
			return early, nil
		}
		return s.record(layers, m.Version)
	})
	if err != nil && isNamed {
		if uerr := s.unname(m.Version); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}
	return a, err
}

// unname drops version's artifact from index.json, and what only it
// used.
func (s *Share) unname(version string) error {
	entries, err := s.readIndex()
	if err != nil {
		return err
	}
	kept := entries[:0]
	for _, e := range entries {
		if e.Annotations[refNameAnnotation] != version {
			kept = append(kept, e)
		}
	}
	if err := s.writeIndex(kept); err != nil {
		return err
	}
	if err := s.sweep(); err != nil {
		return fmt.Errorf("drop what was copied: %w", err)
	}
	return nil
}

// Tee takes a second copy of one part as Add copies it. Add copies the
// other parts first, each checked; then, with nothing refused yet, it
// calls Open (nil: no copy) and writes the writer it returns the part's
// bytes from the same reads, before Add knows whether they match (a part
// is checked once whole): the writer's copy is the part only once Add
// returned without an error. ReadBack then reads the share's copy from
// its disk, to compare. The writer's first error stops the copy to it,
// not Add.
type Tee struct {
	Part string
	Open func() io.Writer
}

// teeWriter writes to w until its first error, and then nothing.
type teeWriter struct {
	w   io.Writer
	err error
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if t.err == nil {
		n, err := t.w.Write(p)
		if err == nil && n != len(p) {
			err = io.ErrShortWrite
		}
		t.err = err
	}
	return len(p), nil
}

// ReadBack reads the part name of the artifact a as the share's disk
// holds it, not from the page cache: what a tee's writer compares its
// own copy with. Its blob was synced as it was renamed into place.
func (s *Share) ReadBack(a Artifact, name string) (io.ReadCloser, error) {
	for _, l := range a.layers {
		if l.MediaType == PartMediaType && l.Annotations[titleAnnotation] == name {
			f, err := os.Open(s.blobPath(l.Digest))
			if err != nil {
				return nil, fmt.Errorf("read back part %s of upgrade %s: %w", name, a.Version, err)
			}
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("read back part %s of upgrade %s: drop %s from the cache: %w", name, a.Version, f.Name(), err)
			}
			return f, nil
		}
	}
	return nil, fmt.Errorf("read back part %s of upgrade %s: the artifact has no such part", name, a.Version)
}

// AddWhole copies the upgrade v into the share as earlier versions did,
// and as their nodes read it: the file whole, in one layer. It is for a
// cluster some of whose nodes run such a version. The file is read once,
// as Assemble makes it of the signed manifest and v's parts, each part
// checked against the manifest as it passes (upgrade.Verified.CheckedPart):
// the share keeps the file only if every part matched (the file's own
// digest, which names its blob, is a second hash). Otherwise as Add.
func (s *Share) AddWhole(ctx context.Context, v *upgrade.Verified) (Artifact, error) {
	version := v.Manifest().Version
	manifest, sig := v.SignedManifest()
	r, size, err := upgrade.Assemble(manifest, sig, func(p upgrade.PartInfo) (io.ReaderAt, error) { return v.CheckedPart(p.Name) })
	if err != nil {
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: %w", version, err)
	}
	return s.add(version, size, func() (Artifact, error) {
		file, n, err := s.putBlob(ctx, io.NewSectionReader(r, 0, size), nil, size)
		if err != nil {
			return Artifact{}, err
		}
		return s.record([]v1.Descriptor{{MediaType: FileMediaType, Digest: file, Size: n,
			Annotations: map[string]string{titleAnnotation: "terrarium-" + version + ".upgrade"}}}, version)
	})
}

// add checks that version can be a tag and that a file of size bytes
// fits, then writes the artifact's layers and records them with write;
// what write copied goes again when it fails.
func (s *Share) add(version string, size int64, write func() (Artifact, error)) (Artifact, error) {
	if !validTag(version) {
		return Artifact{}, fmt.Errorf("add upgrade to the share: version %q cannot be a tag", version)
	}
	if size > MaxFileSize {
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: the file is %d bytes, more than %d", version, size, int64(MaxFileSize))
	}
	if err := s.checkSpace(version, size); err != nil {
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: %w", version, err)
	}
	a, err := write()
	if err != nil {
		// Nothing names what was copied: it goes.
		if serr := s.sweep(); serr != nil {
			err = errors.Join(err, fmt.Errorf("drop what was copied: %w", serr))
		}
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: %w", version, err)
	}
	return a, nil
}

// addLayers writes the layers' blobs: the signed manifest and signature,
// filling in their digests, then each part of v, checked against its.
func (s *Share) addLayers(ctx context.Context, v *upgrade.Verified, layers []v1.Descriptor, manifest, sig []byte, tees []Tee, beforeLast func() error) error {
	for i, b := range [][]byte{manifest, sig} {
		d, _, err := s.putBlob(ctx, bytes.NewReader(b), nil, int64(len(b)))
		if err != nil {
			return err
		}
		layers[i].Digest = d
	}
	// The parts a tee takes go last: every other part is checked before
	// a tee is opened.
	var parts, teed []v1.Descriptor
	for _, l := range layers[2:] {
		if slices.ContainsFunc(tees, func(t Tee) bool { return t.Part == l.Annotations[titleAnnotation] }) {
			teed = append(teed, l)
		} else {
			parts = append(parts, l)
		}
	}
	parts = append(parts, teed...)
	for i, l := range parts {
		name := l.Annotations[titleAnnotation]
		part, _, err := v.Part(name)
		if err != nil {
			return err
		}
		last := i == len(parts)-1 && beforeLast != nil
		f, done, err := s.newBlob(&l.Digest, l.Size, last)
		if err != nil {
			return fmt.Errorf("part %s: %w", name, err)
		}
		if last {
			// Its growing blob is there before anyone is told of it.
			if err := beforeLast(); err != nil {
				done()
				return err
			}
		}
		var r io.Reader = part
		for _, t := range tees {
			if t.Part != name || t.Open == nil {
				continue
			}
			if w := t.Open(); w != nil {
				r = io.TeeReader(r, &teeWriter{w: w})
			}
		}
		if _, _, err := s.writeBlob(ctx, f, done, r, &l.Digest, l.Size); errors.Is(err, ErrDigest) {
			return fmt.Errorf("part %s differs from its signed manifest: %w", name, err)
		} else if err != nil {
			return fmt.Errorf("part %s: %w", name, err)
		}
	}
	return nil
}

// checkSpace refuses an upgrade file of size bytes that would leave less
// than the reserve free on the share's file system.
func (s *Share) checkSpace(version string, size int64) error {
	return diskspace.Check(s.space, diskspace.Need{
		What: "the upgrade file " + version, Path: s.dir, Bytes: uint64(size), Reserve: s.reserve,
		Fix: "free space on TERRA-STATE or enlarge it (the runbook's \"TERRA-STATE is full\")",
	})
}

// record writes the artifact's config and manifest for layers the share
// holds and names it in index.json.
func (s *Share) record(layers []v1.Descriptor, version string) (Artifact, error) {
	empty, _, err := s.putBlob(context.Background(), strings.NewReader(emptyJSON), nil, 2)
	if err != nil {
		return Artifact{}, err
	}
	raw, err := manifestFor(empty, layers, version)
	if err != nil {
		return Artifact{}, err
	}
	mdig, msize, err := s.putBlob(context.Background(), bytes.NewReader(raw), nil, int64(len(raw)))
	if err != nil {
		return Artifact{}, err
	}
	if err := s.index(mdig, msize, version); err != nil {
		return Artifact{}, err
	}
	return Artifact{Manifest: mdig, Version: version, Size: fileSize(layers), layers: layers}, nil
}

// index names the manifest with digest d (size bytes) in index.json as
// version, in place of any other artifact of that version.
func (s *Share) index(d v1.Hash, size int64, version string) error {
	if !validTag(version) {
		return fmt.Errorf("add upgrade to the share: version %q cannot be a tag", version)
	}
	entries, err := s.readIndex()
	if err != nil {
		return err
	}
	kept := entries[:0]
	for _, e := range entries {
		if e.Digest != d && e.Annotations[refNameAnnotation] != version {
			kept = append(kept, e)
		}
	}
	kept = append(kept, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: size, ArtifactType: ArtifactType,
		Annotations: map[string]string{refNameAnnotation: version, imageNameAnnotation: layout.UpgradeRepository + ":" + version}})
	return s.writeIndex(kept)
}

// validTag reports whether version can be an OCI tag.
func validTag(version string) bool {
	if version == "" || len(version) > 128 {
		return false
	}
	for i, c := range version {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || i > 0 && (c == '.' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// Annotations of index.json entries: the OCI tag, and the full name the
// node's registry reads (containerd's convention, as in the bundle).
const (
	refNameAnnotation   = "org.opencontainers.image.ref.name"
	imageNameAnnotation = "io.containerd.image.name"
)

// putBlob copies r into the blobs, renamed into place once whole, and
// returns its digest and size. With want, the content must have that
// digest and limit bytes (ErrDigest otherwise). More than limit bytes are
// refused.
func (s *Share) putBlob(ctx context.Context, r io.Reader, want *v1.Hash, limit int64) (v1.Hash, int64, error) {
	f, done, err := s.newBlob(want, limit, false)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	return s.writeBlob(ctx, f, done, r, want, limit)
}

// newBlob creates the file a blob is written to before it is renamed
// into place: the growing blob of want (registry.CreateGrowing) when
// growing, which the node's registry serves to its peers as it grows, or
// else a temporary file. done closes and removes it (once renamed into
// place, nothing is there to remove) and lets go of it.
func (s *Share) newBlob(want *v1.Hash, limit int64, growing bool) (f *os.File, done func(), err error) {
	dir := filepath.Join(s.dir, "blobs", "sha256")
	release := func() {}
	if growing && want != nil {
		f, release, err = registry.CreateGrowing(dir, want.Hex, limit)
	} else {
		f, err = os.CreateTemp(dir, ".in-*")
	}
	if err != nil {
		return nil, nil, err
	}
	return f, func() {
		_ = f.Close() // closed already, unless it failed before its write
		_ = os.Remove(f.Name())
		release()
	}, nil
}

// writeBlob writes the blob read from r to f, a file of newBlob's, and
// renames it into place, as putBlob; done is newBlob's.
func (s *Share) writeBlob(ctx context.Context, f *os.File, done func(), r io.Reader, want *v1.Hash, limit int64) (v1.Hash, int64, error) {
	defer done()
	h := sha256.New()
	// Read (and whatever r checks on the way, a stick's parts) ahead of
	// the write and its hash.
	n, err := readahead.Copy(ctx, io.MultiWriter(f, h), io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return v1.Hash{}, 0, err
	}
	if n > limit {
		if want != nil {
			return v1.Hash{}, 0, fmt.Errorf("%w: more than its %d bytes", ErrDigest, limit)
		}
		return v1.Hash{}, 0, fmt.Errorf("more than %d bytes", limit)
	}
	if want != nil && n != limit {
		return v1.Hash{}, 0, fmt.Errorf("%w: it ended after %d of its %d bytes", ErrDigest, n, limit)
	}
	d := digestOf(h)
	if want != nil && d != *want {
		return v1.Hash{}, 0, fmt.Errorf("%w: got %s, want %s", ErrDigest, d, want)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return v1.Hash{}, 0, err
	}
	if err := atomicfile.Replace(f.Name(), s.blobPath(d)); err != nil {
		return v1.Hash{}, 0, err
	}
	return d, n, nil
}

// ErrDigest means content is not what its digest says.
var ErrDigest = errors.New("content does not match its digest")

func digestOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

// indexMax bounds the share's own index.json.
const indexMax = 1 << 20

func (s *Share) readIndex() ([]v1.Descriptor, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("read the upgrade share's index: %w", err)
	}
	if len(b) > indexMax {
		return nil, fmt.Errorf("the upgrade share's index %s is %d bytes, more than %d", filepath.Join(s.dir, "index.json"), len(b), indexMax)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(s.dir, "index.json"), err)
	}
	return idx.Manifests, nil
}

func (s *Share) writeIndex(entries []v1.Descriptor) error {
	if entries == nil {
		entries = []v1.Descriptor{}
	}
	sort.Slice(entries, func(i, j int) bool {
		return entries[i].Annotations[refNameAnnotation] < entries[j].Annotations[refNameAnnotation]
	})
	b, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: entries})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, "index.json"), b, 0o644); err != nil {
		return fmt.Errorf("write the upgrade share's index: %w", err)
	}
	return nil
}

// List is every artifact the share holds.
func (s *Share) List() ([]Artifact, error) {
	entries, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	var out []Artifact
	for _, e := range entries {
		if a, ok := s.artifact(e.Digest); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// artifact reads the manifest of digest d, ok false when the share does
// not hold it or it is not an upgrade artifact's.
func (s *Share) artifact(d v1.Hash) (Artifact, bool) {
	raw, err := readSmall(s.blobPath(d), manifestMax)
	if err != nil {
		return Artifact{}, false // pruned under it; not listed
	}
	a, err := parseManifest(raw)
	if err != nil {
		return Artifact{}, false
	}
	a.Manifest = d
	return a, true
}

// readSmall reads the file at path, of at most limit bytes.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s has more than %d bytes", path, limit)
	}
	return b, nil
}

// Find is the artifact whose manifest has digest, ok false when the share
// does not hold it whole.
func (s *Share) Find(manifest v1.Hash) (Artifact, bool) {
	all, err := s.List()
	if err != nil {
		return Artifact{}, false
	}
	for _, a := range all {
		if a.Manifest == manifest && s.holdsAll(a.layers) {
			return a, true
		}
	}
	return Artifact{}, false
}

// holdsAll reports whether the share holds every blob of layers, of the
// size each says.
func (s *Share) holdsAll(layers []v1.Descriptor) bool {
	for _, l := range layers {
		if !s.holds(l) {
			return false
		}
	}
	return true
}

// holds reports whether the share holds the blob of l, of its size: a
// blob is renamed into place only once it matched its digest.
func (s *Share) holds(l v1.Descriptor) bool {
	fi, err := os.Stat(s.blobPath(l.Digest))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == l.Size
}

// Prune removes every artifact but those whose manifests are in keep,
// with their blobs: the share holds what a rollout needs, and no more.
func (s *Share) Prune(keep ...v1.Hash) error {
	entries, err := s.readIndex()
	if err != nil {
		return err
	}
	var kept []v1.Descriptor
	for _, e := range entries {
		if slices.Contains(keep, e.Digest) {
			kept = append(kept, e)
		}
	}
	if err := s.writeIndex(kept); err != nil {
		return err
	}
	return s.sweep()
}

// sweep removes every blob that no artifact index.json names uses, but
// those of keep: what Prune dropped, what an Add that failed wrote, and
// what a Fetch of another artifact left.
func (s *Share) sweep(keep ...v1.Descriptor) error {
	entries, err := s.readIndex()
	if err != nil {
		return err
	}
	used := map[string]bool{emptyHex: true}
	for _, l := range keep {
		used[l.Digest.Hex] = true
	}
	for _, e := range entries {
		used[e.Digest.Hex] = true
		if a, ok := s.artifact(e.Digest); ok {
			for _, l := range a.layers {
				used[l.Digest.Hex] = true
			}
		}
	}
	dir := filepath.Join(s.dir, "blobs", "sha256")
	names, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !used[n.Name()] {
			if err := os.Remove(filepath.Join(dir, n.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("prune the upgrade share: %w", err)
			}
		}
	}
	return atomicfile.SyncDir(dir)
}

// emptyHex is the digest of OCI's empty descriptor, "{}".
const emptyHex = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
