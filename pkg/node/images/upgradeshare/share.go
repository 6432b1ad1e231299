// Package upgradeshare keeps the upgrade files a node accepted, or
// fetched from its peers, as OCI artifacts in an OCI image layout on
// TERRA-STATE (layout.UpgradesDir), which the node's registry serves to
// its peers: an upgrade put into one node reaches every other node
// through the cluster's own registries, over their mutual TLS.
//
// Each upgrade file is one artifact: an OCI image manifest of
// artifactType ArtifactType whose config is the empty descriptor and whose
// one layer is the upgrade file itself, byte for byte. Its index.json
// entry names it layout.UpgradeRepository:<version>. The layout is
// written by one writer, firstboot: blobs first, each renamed into place
// whole, then index.json replaced atomically, so that a reader (the
// registry) and a power cut see the old layout or the new one.
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
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/readahead"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// Media types of the artifact.
const (
	// ArtifactType is the manifest's artifactType.
	ArtifactType = "application/vnd.terrarium.upgrade.v1"
	// FileMediaType is the layer's: the upgrade file.
	FileMediaType types.MediaType = "application/vnd.terrarium.upgrade.v1.file"
	// emptyMediaType and emptyJSON are OCI's empty descriptor.
	emptyMediaType types.MediaType = "application/vnd.oci.empty.v1+json"
	emptyJSON      string          = "{}"
)

// MaxFileSize bounds an upgrade file fetched from a peer.
const MaxFileSize = 4 << 30

// Artifact is one upgrade file in the share.
type Artifact struct {
	// Manifest is the digest of the artifact's manifest: what a rollout
	// names and peers fetch.
	Manifest v1.Hash
	// File is the upgrade file's digest, Size its size.
	File    v1.Hash
	Size    int64
	Version string
}

// Ref is the artifact's reference in the cluster's registry.
func (a Artifact) Ref() string { return layout.UpgradeRepository + "@" + a.Manifest.String() }

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

// FilePath is where an artifact's upgrade file is.
func (s *Share) FilePath(a Artifact) string { return s.blobPath(a.File) }

// Add copies the upgrade file r of size bytes for version into the share
// and records it. Adding a file the share holds already records it again.
// A file that would leave less than the reserve free (WithSpace) is
// refused before anything is written (diskspace.ErrNoSpace).
func (s *Share) Add(ctx context.Context, r io.Reader, size int64, version string) (Artifact, error) {
	if !validTag(version) {
		return Artifact{}, fmt.Errorf("add upgrade to the share: version %q cannot be a tag", version)
	}
	if size <= 0 || size > MaxFileSize {
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: the file is %d bytes, outside 1..%d", version, size, int64(MaxFileSize))
	}
	if err := s.checkSpace(version, size); err != nil {
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: %w", version, err)
	}
	file, _, err := s.putBlob(ctx, &sizedReader{r: r, left: size}, nil, size)
	if err != nil {
		return Artifact{}, fmt.Errorf("add upgrade %s to the share: %w", version, err)
	}
	return s.record(file, size, version)
}

// checkSpace refuses an upgrade file of size bytes that would leave less
// than the reserve free on the share's file system.
func (s *Share) checkSpace(version string, size int64) error {
	return diskspace.Check(s.space, diskspace.Need{
		What: "the upgrade file " + version, Path: s.dir, Bytes: uint64(size), Reserve: s.reserve,
		Fix: "free space on TERRA-STATE or enlarge it (the runbook's \"TERRA-STATE is full\")",
	})
}

// record writes the artifact's config and manifest for an upgrade file
// the share holds and names it in index.json.
func (s *Share) record(file v1.Hash, size int64, version string) (Artifact, error) {
	empty, _, err := s.putBlob(context.Background(), strings.NewReader(emptyJSON), nil, 2)
	if err != nil {
		return Artifact{}, err
	}
	raw, err := manifestFor(empty, file, size, version)
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
	return Artifact{Manifest: mdig, File: file, Size: size, Version: version}, nil
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

// manifestJSON is the artifact's manifest.
type manifestJSON struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     types.MediaType   `json:"mediaType"`
	ArtifactType  string            `json:"artifactType"`
	Config        v1.Descriptor     `json:"config"`
	Layers        []v1.Descriptor   `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

func manifestFor(empty, file v1.Hash, size int64, version string) ([]byte, error) {
	m := manifestJSON{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
		Config: v1.Descriptor{MediaType: emptyMediaType, Digest: empty, Size: int64(len(emptyJSON)), Data: []byte(emptyJSON)},
		Layers: []v1.Descriptor{{MediaType: FileMediaType, Digest: file, Size: size,
			Annotations: map[string]string{"org.opencontainers.image.title": "terrarium-" + version + ".upgrade"}}},
		Annotations: map[string]string{"org.opencontainers.image.version": version}}
	return json.Marshal(m)
}

// parseManifest reads an artifact's manifest: one of ours, or refused.
func parseManifest(raw []byte) (file v1.Descriptor, version string, err error) {
	var m manifestJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return v1.Descriptor{}, "", fmt.Errorf("not an upgrade artifact manifest: %w", err)
	}
	if m.ArtifactType != ArtifactType || len(m.Layers) != 1 || m.Layers[0].MediaType != FileMediaType {
		return v1.Descriptor{}, "", fmt.Errorf("not an upgrade artifact manifest: artifactType %q with %d layers", m.ArtifactType, len(m.Layers))
	}
	l := m.Layers[0]
	if l.Size <= 0 || l.Size > MaxFileSize {
		return v1.Descriptor{}, "", fmt.Errorf("upgrade artifact: its file is %d bytes, outside 1..%d", l.Size, int64(MaxFileSize))
	}
	return l, m.Annotations["org.opencontainers.image.version"], nil
}

// putBlob copies r into the blobs, renamed into place once whole, and
// returns its digest and size. With want, the content must have that
// digest (ErrDigest otherwise). More than limit bytes are refused.
func (s *Share) putBlob(ctx context.Context, r io.Reader, want *v1.Hash, limit int64) (v1.Hash, int64, error) {
	dir := filepath.Join(s.dir, "blobs", "sha256")
	f, err := os.CreateTemp(dir, ".in-*")
	if err != nil {
		return v1.Hash{}, 0, err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // gone once renamed
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
		return v1.Hash{}, 0, fmt.Errorf("more than %d bytes", limit)
	}
	d := digestOf(h)
	if want != nil && d != *want {
		return v1.Hash{}, 0, fmt.Errorf("%w: got %s, want %s", ErrDigest, d, want)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return v1.Hash{}, 0, err
	}
	if err := atomicfile.Replace(tmp, s.blobPath(d)); err != nil {
		return v1.Hash{}, 0, err
	}
	return d, n, nil
}

// ErrDigest means content is not what its digest says.
var ErrDigest = errors.New("content does not match its digest")

func digestOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

// sizedReader reads a file of a known size: one that ends early is an
// error (one that goes on, putBlob's limit refuses).
type sizedReader struct {
	r    io.Reader
	left int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if errors.Is(err, io.EOF) && s.left > 0 {
		return n, fmt.Errorf("the file ended %d bytes before its size: %w", s.left, io.ErrUnexpectedEOF)
	}
	return n, err
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
		raw, err := os.ReadFile(s.blobPath(e.Digest))
		if err != nil {
			continue // pruned under it; not listed
		}
		file, version, err := parseManifest(raw)
		if err != nil {
			continue
		}
		out = append(out, Artifact{Manifest: e.Digest, File: file.Digest, Size: file.Size, Version: version})
	}
	return out, nil
}

// Find is the artifact whose manifest has digest, ok false when the share
// does not hold it whole.
func (s *Share) Find(manifest v1.Hash) (Artifact, bool) {
	all, err := s.List()
	if err != nil {
		return Artifact{}, false
	}
	for _, a := range all {
		if a.Manifest == manifest {
			if fi, err := os.Stat(s.FilePath(a)); err == nil && fi.Size() == a.Size {
				return a, true
			}
		}
	}
	return Artifact{}, false
}

// Prune removes every artifact but those whose manifests are in keep,
// with their files: the share holds what a rollout needs, and no more.
func (s *Share) Prune(keep ...v1.Hash) error {
	entries, err := s.readIndex()
	if err != nil {
		return err
	}
	wanted := map[v1.Hash]bool{}
	for _, k := range keep {
		wanted[k] = true
	}
	var kept []v1.Descriptor
	for _, e := range entries {
		if wanted[e.Digest] {
			kept = append(kept, e)
		}
	}
	if err := s.writeIndex(kept); err != nil {
		return err
	}
	// Every blob no kept manifest references goes.
	used := map[string]bool{}
	for _, e := range kept {
		used[e.Digest.Hex] = true
		if raw, err := os.ReadFile(s.blobPath(e.Digest)); err == nil {
			if file, _, err := parseManifest(raw); err == nil {
				used[file.Digest.Hex] = true
			}
		}
	}
	dir := filepath.Join(s.dir, "blobs", "sha256")
	names, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !used[n.Name()] && n.Name() != emptyHex {
			if err := os.Remove(filepath.Join(dir, n.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("prune the upgrade share: %w", err)
			}
		}
	}
	return atomicfile.SyncDir(dir)
}

// emptyHex is the digest of OCI's empty descriptor, "{}".
const emptyHex = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
