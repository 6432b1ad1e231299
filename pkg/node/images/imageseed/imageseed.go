// Package imageseed registers the slot's bundled images in containerd's
// store before containerd starts, as a pull of each would have left them:
// the image's names, its index, manifest and config in the content store
// with containerd's garbage-collection labels, and its layers' snapshots
// in the node's snapshotter, taken from the slot (pkg/node/images/snapshotter).
//
// containerd then starts with every bundled image present: its CRI
// plugin loads them (CheckImages), kubeadm's preflight and the kubelet
// find them, and no node pulls an image it carries, not even from its own
// registry. Nothing proportional to an image's size is read or written:
// a few kilobytes of manifests and configs, and one link per layer.
//
// It runs in the snapshotter's service on every boot (a first boot, a
// boot after repair-images emptied the stores, the first boot of an
// upgraded slot): a name containerd already has is left as it is.
package imageseed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/core/metadata/boltutil"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Labels of containerd: the unpacker's snapshot target and diffID, the
// garbage collector's reference from a config to its image's snapshot, and
// the CRI plugin's mark on the images it manages.
const (
	labelSnapshotRef = "containerd.io/snapshot.ref"
	labelDiffID      = "containerd.io/snapshot/diff-id"
	labelGCSnapshot  = "containerd.io/gc.ref.snapshot."
	labelCRIImage    = "io.cri-containerd.image"
	criImageManaged  = "managed"
)

// annotationNames are the index annotations that name a bundled image.
var annotationNames = []string{images.AnnotationImageName, ocispec.AnnotationRefName}

// ErrContainerdRunning is returned when containerd holds its store.
var ErrContainerdRunning = errors.New("containerd holds its metadata store")

// Options say where the stores are.
type Options struct {
	// Bundle is the slot's bundle (an OCI layout), SlotLayers its layers
	// unpacked (layout.SlotLayer).
	Bundle, SlotLayers string
	// MetaDB and ContentDir are containerd's metadata and content
	// stores, Namespace the namespace to register the images in.
	MetaDB, ContentDir, Namespace string
	// Snapshotter is the node's snapshotter, as containerd knows it by
	// SnapshotterName.
	Snapshotter     snapshots.Snapshotter
	SnapshotterName string
	// LockTimeout bounds the wait for containerd's store: containerd
	// holds it while it runs.
	LockTimeout time.Duration
	// Now is the clock Result.Took is measured with.
	Now func() time.Time
}

// NodeOptions are the node's stores (pkg/contract/layout) with sn.
func NodeOptions(sn snapshots.Snapshotter) Options {
	return Options{
		Bundle:          layout.BundleDir,
		SlotLayers:      layout.SlotLayersDir,
		MetaDB:          layout.ContainerdMetaDB,
		ContentDir:      layout.ContainerdContentDir,
		Namespace:       layout.ContainerdCRINamespace,
		Snapshotter:     sn,
		SnapshotterName: layout.SnapshotterName,
		LockTimeout:     2 * time.Second,
		Now:             time.Now,
	}
}

// Result is what Seed did, by image name.
type Result struct {
	// Seeded were registered now, Present containerd had already.
	Seeded, Present []string
	// Skipped could not be registered, with why (they are pulled as
	// before).
	Skipped map[string]string
	// Took is how long each part took: opening the stores, the content,
	// the snapshots, the names, and the commit (the file system's sync,
	// then the transaction's).
	Took Durations
}

// Durations are the parts of a Seed's time.
type Durations struct {
	Open, Content, Snapshots, Names, Commit time.Duration
}

func (d Durations) String() string {
	return fmt.Sprintf("open %s, content %s, snapshots %s, names %s, commit %s",
		d.Open.Round(time.Millisecond), d.Content.Round(time.Millisecond), d.Snapshots.Round(time.Millisecond),
		d.Names.Round(time.Millisecond), d.Commit.Round(time.Millisecond))
}

// Seed registers every image of the bundle that containerd lacks, in one
// transaction of containerd's metadata store (one sync, not a few per
// record: under emulation each costs tens of milliseconds). An image the
// slot lacks a layer of is skipped (Result.Skipped) and left to a pull;
// an error means nothing was registered.
func Seed(ctx context.Context, o Options) (Result, error) {
	res := Result{Skipped: map[string]string{}}
	if o.Now == nil {
		o.Now = time.Now
	}
	start := o.Now()
	idx, err := readIndex(o.Bundle)
	if err != nil {
		return res, err
	}
	db, bdb, err := openDB(ctx, o)
	if err != nil {
		return res, err
	}
	defer bdb.Close()
	res.Took.Open = o.Now().Sub(start)
	ctx = namespaces.WithNamespace(ctx, o.Namespace)
	s := seeder{
		o:       o,
		took:    &res.Took,
		bundle:  bundleProvider(o.Bundle),
		content: db.ContentStore(),
		images:  metadata.NewImageStore(db),
		sn:      db.Snapshotter(o.SnapshotterName),
	}
	var commitStart time.Time
	err = bdb.Update(func(tx *bolt.Tx) error {
		ctx := boltutil.WithTransaction(ctx, tx)
		for _, d := range idx.Manifests {
			named := imageName(d)
			if named == nil || !(images.IsIndexType(d.MediaType) || images.IsManifestType(d.MediaType)) {
				continue
			}
			name := named.String()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, err := s.images.Get(ctx, name); err == nil {
				res.Present = append(res.Present, name)
				continue
			} else if !errdefs.IsNotFound(err) {
				return fmt.Errorf("look up image %s: %w", name, err)
			}
			target := ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
			var skip notInSlot
			switch err := s.image(ctx, named, target); {
			case err == nil:
				res.Seeded = append(res.Seeded, name)
			case errors.As(err, &skip):
				res.Skipped[name] = err.Error()
			default:
				return fmt.Errorf("register image %s: %w", name, err)
			}
		}
		// The blobs, before the records of them.
		commitStart = o.Now()
		if s.wrote {
			if err := atomicfile.SyncFS(o.ContentDir); err != nil {
				return err
			}
		}
		return nil
	})
	if !commitStart.IsZero() {
		res.Took.Commit = o.Now().Sub(commitStart)
	}
	if err != nil {
		res.Seeded = nil
		return res, fmt.Errorf("register the slot's images in %s: %w", o.MetaDB, err)
	}
	return res, nil
}

// notInSlot is an image the slot lacks a layer of.
type notInSlot struct{ err error }

func (e notInSlot) Error() string { return e.err.Error() }

// openDB opens containerd's metadata store as containerd does (its bolt
// plugin's options), with the node's snapshotter.
func openDB(ctx context.Context, o Options) (*metadata.DB, *bolt.DB, error) {
	if err := os.MkdirAll(filepath.Dir(o.MetaDB), 0o711); err != nil {
		return nil, nil, fmt.Errorf("containerd's metadata store: %w", err)
	}
	opts := *bolt.DefaultOptions
	opts.NoFreelistSync = true
	opts.Timeout = o.LockTimeout
	bdb, err := bolt.Open(o.MetaDB, 0o644, &opts)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, nil, fmt.Errorf("open %s: %w", o.MetaDB, ErrContainerdRunning)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open containerd's metadata store %s: %w", o.MetaDB, err)
	}
	cs, err := local.NewStore(o.ContentDir)
	if err != nil {
		_ = bdb.Close()
		return nil, nil, fmt.Errorf("open containerd's content store %s: %w", o.ContentDir, err)
	}
	db := metadata.NewDB(bdb, cs, map[string]snapshots.Snapshotter{o.SnapshotterName: o.Snapshotter})
	if err := db.Init(ctx); err != nil {
		_ = bdb.Close()
		return nil, nil, fmt.Errorf("open containerd's metadata store %s: %w", o.MetaDB, err)
	}
	return db, bdb, nil
}

type seeder struct {
	o    Options
	took *Durations
	// wrote is set once a blob was written unsynced.
	wrote   bool
	bundle  bundleProvider
	content content.Store
	images  images.Store
	sn      snapshots.Snapshotter
}

// image registers one image: its content, its snapshots, then its names.
// What it needs of the bundle is read, and its layers looked for in the
// slot, before anything is written.
func (s *seeder) image(ctx context.Context, name reference.Named, target ocispec.Descriptor) error {
	manifest, err := images.Manifest(ctx, s.bundle, target, platforms.Default())
	if err != nil {
		return err
	}
	diffIDs, err := images.RootFS(ctx, s.bundle, manifest.Config)
	if err != nil {
		return err
	}
	if err := s.inSlot(diffIDs); err != nil {
		return err
	}
	// As containerd's pull does: the index, the manifest for this
	// platform and its config, each labelled with its children.
	children := images.ChildrenHandler(s.content)
	children = images.SetChildrenMappedLabels(s.content, children, images.ChildGCLabels)
	children = images.FilterPlatforms(children, platforms.Default())
	children = images.LimitManifests(children, platforms.Default(), 1)
	t := s.o.Now()
	if err := images.Walk(ctx, images.Handlers(images.HandlerFunc(s.copyBlob), children), target); err != nil {
		return err
	}
	t = s.lap(&s.took.Content, t)
	top, err := s.snapshots(ctx, diffIDs)
	if err != nil {
		return err
	}
	t = s.lap(&s.took.Snapshots, t)
	defer s.lap(&s.took.Names, t)
	// The config keeps the image's snapshots from the garbage collector.
	gc := labelGCSnapshot + s.o.SnapshotterName
	if _, err := s.content.Update(ctx, content.Info{Digest: manifest.Config.Digest, Labels: map[string]string{gc: top}}, "labels."+gc); err != nil {
		return fmt.Errorf("label config %s: %w", manifest.Config.Digest, err)
	}
	// The CRI plugin's names for a pulled image: its ID (the config's
	// digest), its tag and its digest reference.
	dr, err := reference.WithDigest(reference.TrimNamed(name), target.Digest)
	if err != nil {
		return err
	}
	refs := []string{manifest.Config.Digest.String(), name.String(), dr.String()}
	for _, r := range refs {
		img := images.Image{Name: r, Target: target, Labels: map[string]string{labelCRIImage: criImageManaged}}
		if _, err := s.images.Create(ctx, img); err != nil && !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("create image %s: %w", r, err)
		}
	}
	return nil
}

// lap adds the time since t to d, and returns now.
func (s *seeder) lap(d *time.Duration, t time.Time) time.Time {
	now := s.o.Now()
	*d += now.Sub(t)
	return now
}

// copyBlob copies a descriptor's blob from the bundle into containerd's
// content store; layers stay in the slot (their snapshots are the slot's).
// The blob goes into the store's files unsynced (Seed syncs the file
// system once, before its transaction commits) and is then recorded as
// containerd records content its store already has (its shared policy).
func (s *seeder) copyBlob(ctx context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	if images.IsLayerType(d.MediaType) {
		return nil, nil
	}
	if _, err := s.content.Info(ctx, d.Digest); err == nil {
		return nil, nil
	}
	b, err := s.bundle.read(d)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(s.o.ContentDir, ocispec.ImageBlobsDir, d.Digest.Algorithm().String(), d.Digest.Encoded())
	if fi, err := os.Stat(p); err != nil || fi.Size() != d.Size {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFileUnsynced(p, b, 0o444); err != nil {
			return nil, fmt.Errorf("write %s into containerd's content store: %w", d.Digest, err)
		}
		s.wrote = true
	}
	w, err := s.content.Writer(ctx, content.WithRef("terrarium-seed-"+d.Digest.String()), content.WithDescriptor(d))
	if errdefs.IsAlreadyExists(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("record %s in containerd's content store: %w", d.Digest, err)
	}
	defer w.Close()
	if err := w.Commit(ctx, d.Size, d.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return nil, fmt.Errorf("record %s in containerd's content store: %w", d.Digest, err)
	}
	return nil, nil
}

// inSlot checks that the slot holds every layer: the snapshotter would
// otherwise prepare an empty snapshot to unpack into.
func (s *seeder) inSlot(diffIDs []digest.Digest) error {
	for _, d := range diffIDs {
		dir, ok := layout.SlotLayer(s.o.SlotLayers, d.String())
		if !ok {
			return notInSlot{fmt.Errorf("layer %s: not a layer the slot can hold", d)}
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return notInSlot{fmt.Errorf("layer %s is not in the slot (%s)", d, dir)}
		}
	}
	return nil
}

// snapshots makes the image's layers' snapshots (by chain ID) exist,
// taken from the slot, and returns the top one.
func (s *seeder) snapshots(ctx context.Context, diffIDs []digest.Digest) (string, error) {
	chain := identity.ChainIDs(append([]digest.Digest(nil), diffIDs...))
	parent := ""
	for i, c := range chain {
		if _, err := s.sn.Stat(ctx, c.String()); err == nil {
			parent = c.String()
			continue
		}
		labels := map[string]string{labelSnapshotRef: c.String(), labelDiffID: diffIDs[i].String()}
		key := "terrarium-seed " + c.String()
		_, err := s.sn.Prepare(ctx, key, parent, snapshots.WithLabels(labels))
		switch {
		case errdefs.IsAlreadyExists(err):
		case err == nil:
			// The snapshotter did not take the layer from the slot.
			if rerr := s.sn.Remove(ctx, key); rerr != nil {
				return "", fmt.Errorf("layer %s was not taken from the slot, and its snapshot stays: %w", diffIDs[i], rerr)
			}
			return "", fmt.Errorf("layer %s was not taken from the slot", diffIDs[i])
		default:
			return "", fmt.Errorf("snapshot of layer %s: %w", diffIDs[i], err)
		}
		parent = c.String()
	}
	return parent, nil
}

// imageName is the name a bundle's index gives a descriptor, when it is
// a whole name (registry, repository and tag: the name containerd gives
// a pulled image); a bare tag names nothing containerd would look up.
func imageName(d ocispec.Descriptor) reference.Named {
	for _, k := range annotationNames {
		v := d.Annotations[k]
		named, err := reference.ParseNormalizedNamed(v)
		if v == "" || err != nil || named.String() != v {
			continue
		}
		if _, ok := named.(reference.Tagged); ok {
			return named
		}
	}
	return nil
}

// readIndex reads the bundle's index.
func readIndex(dir string) (ocispec.Index, error) {
	var idx ocispec.Index
	p := filepath.Join(dir, ocispec.ImageIndexFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return idx, fmt.Errorf("read the slot's bundle: %w", err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("read the slot's bundle %s: %w", p, err)
	}
	return idx, nil
}

// bundleProvider reads the bundle's blobs; as a content.Provider it
// gives indexes, manifests and configs (small) from memory.
type bundleProvider string

// ReaderAt implements content.Provider.
func (b bundleProvider) ReaderAt(_ context.Context, d ocispec.Descriptor) (content.ReaderAt, error) {
	data, err := b.read(d)
	if err != nil {
		return nil, err
	}
	return blobReader{bytes.NewReader(data)}, nil
}

type blobReader struct{ *bytes.Reader }

func (blobReader) Close() error { return nil }

// read is a blob's content, checked against its descriptor.
func (b bundleProvider) read(d ocispec.Descriptor) ([]byte, error) {
	if err := d.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("bundle blob %q: %w", d.Digest, err)
	}
	p := filepath.Join(string(b), ocispec.ImageBlobsDir, d.Digest.Algorithm().String(), d.Digest.Encoded())
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("bundle blob: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, d.Size+1))
	if err != nil {
		return nil, fmt.Errorf("read bundle blob %s: %w", p, err)
	}
	if int64(len(data)) != d.Size || d.Digest.Algorithm().FromBytes(data) != d.Digest {
		return nil, fmt.Errorf("bundle blob %s does not match its descriptor (%s, %d bytes)", p, d.Digest, d.Size)
	}
	return data, nil
}
