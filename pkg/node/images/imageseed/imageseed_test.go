package imageseed

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/metadata"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ggcrlayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/terrarium-os/terrarium/pkg/image/layers"
	"github.com/terrarium-os/terrarium/pkg/node/images/snapshotter"
)

const (
	pauseName   = "registry.k8s.io/pause:3.10.2"
	flannelName = "docker.io/flannel/flannel:v0.28.10"
	ns          = "k8s.io"
)

// node is a slot (a bundle and its unpacked layers) and a node's stores.
type node struct {
	bundle, slotLayers, containerd string
	sn                             *snapshotter.Snapshotter
}

func (n node) options() Options {
	return Options{
		Bundle: n.bundle, SlotLayers: n.slotLayers,
		MetaDB:     filepath.Join(n.containerd, "io.containerd.metadata.v1.bolt", "meta.db"),
		ContentDir: filepath.Join(n.containerd, "io.containerd.content.v1.content"),
		Namespace:  ns, Snapshotter: n.sn, SnapshotterName: "terrarium", LockTimeout: 100 * time.Millisecond,
	}
}

// newNode writes a bundle of the named images, unpacks their layers as
// the build does, and opens the node's snapshotter on an empty store.
func newNode(t *testing.T, imgs map[string]v1.ImageIndex, plain map[string]v1.Image) node {
	t.Helper()
	require.Zero(t, os.Geteuid(), "unpacking layers and overlayfs snapshots need root")
	n := node{bundle: t.TempDir(), slotLayers: t.TempDir(), containerd: t.TempDir()}
	p, err := ggcrlayout.Write(n.bundle, empty.Index)
	require.NoError(t, err)
	for name, img := range plain {
		require.NoError(t, p.AppendImage(img, ggcrlayout.WithAnnotations(map[string]string{images.AnnotationImageName: name})))
	}
	for name, idx := range imgs {
		require.NoError(t, p.AppendIndex(idx, ggcrlayout.WithAnnotations(map[string]string{images.AnnotationImageName: name})))
	}
	_, err = layers.Unpack(context.Background(), n.bundle, n.slotLayers, nil)
	require.NoError(t, err)
	n.sn, err = snapshotter.New(t.TempDir(), n.slotLayers, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.sn.Close() })
	return n
}

// openStore opens containerd's stores as containerd would, closed when
// the test ends.
func openStore(t *testing.T, n node) *metadata.DB {
	t.Helper()
	o := n.options()
	bdb, err := bolt.Open(o.MetaDB, 0o644, &bolt.Options{Timeout: time.Second, NoFreelistSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bdb.Close() })
	cs, err := local.NewStore(o.ContentDir)
	require.NoError(t, err)
	db := metadata.NewDB(bdb, cs, map[string]snapshots.Snapshotter{"terrarium": n.sn})
	require.NoError(t, db.Init(context.Background()))
	return db
}

func randomImage(t *testing.T, layers int64) v1.Image {
	t.Helper()
	img, err := random.Image(512, layers)
	require.NoError(t, err)
	return img
}

// diffIDs are an image's layers' diffIDs, as containerd's digests.
func diffIDs(t *testing.T, img v1.Image) []digest.Digest {
	t.Helper()
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	var out []digest.Digest
	for _, d := range cfg.RootFS.DiffIDs {
		out = append(out, digest.Digest(d.String()))
	}
	return out
}

// assertRunnable checks an image as containerd's CRI plugin and its
// container creation would: present by its names, its content complete
// but for its layers, its top snapshot committed, from the slot.
func assertRunnable(t *testing.T, ctx context.Context, db *metadata.DB, name string, img v1.Image) {
	t.Helper()
	is := metadata.NewImageStore(db)
	i, err := is.Get(ctx, name)
	require.NoError(t, err, "image %s", name)
	assert.Equal(t, criImageManaged, i.Labels[labelCRIImage])

	cfgName, err := img.ConfigName()
	require.NoError(t, err)
	byID, err := is.Get(ctx, cfgName.String())
	require.NoError(t, err, "image %s by its ID", name)
	assert.Equal(t, i.Target, byID.Target)

	available, _, _, missing, err := images.Check(ctx, db.ContentStore(), i.Target, platforms.Default())
	require.NoError(t, err)
	assert.True(t, available, "image %s: index, manifest and config present", name)
	for _, m := range missing {
		assert.True(t, images.IsLayerType(m.MediaType), "image %s lacks %s (%s), not a layer", name, m.Digest, m.MediaType)
	}
	cfgDesc, err := i.Config(ctx, db.ContentStore(), platforms.Default())
	require.NoError(t, err)
	assert.Equal(t, cfgName.String(), cfgDesc.Digest.String())

	top := identity.ChainID(diffIDs(t, img)).String()
	info, err := db.Snapshotter("terrarium").Stat(ctx, top)
	require.NoError(t, err, "image %s: its top snapshot", name)
	assert.Equal(t, snapshots.KindCommitted, info.Kind)
	ci, err := db.ContentStore().Info(ctx, cfgDesc.Digest)
	require.NoError(t, err)
	assert.Equal(t, top, ci.Labels[labelGCSnapshot+"terrarium"], "the config keeps the snapshot from the garbage collector")
}

func TestSeedRegistersBundledImagesAsAPullWould(t *testing.T) {
	pause := randomImage(t, 1)
	amd64, arm64 := randomImage(t, 2), randomImage(t, 2)
	flannel := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: amd64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm64, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	n := newNode(t, map[string]v1.ImageIndex{flannelName: flannel}, map[string]v1.Image{pauseName: pause})

	res, err := Seed(context.Background(), n.options())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{pauseName, flannelName}, res.Seeded)
	assert.Empty(t, res.Skipped)

	db := openStore(t, n)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	// containerd's garbage collector runs at its start: the labels must
	// keep everything the images need.
	_, err = db.GarbageCollect(ctx)
	require.NoError(t, err)
	assertRunnable(t, ctx, db, pauseName, pause)
	assertRunnable(t, ctx, db, flannelName, amd64)

	digestRef, err := metadata.NewImageStore(db).Get(ctx, "registry.k8s.io/pause@"+mustDigest(t, pause))
	require.NoError(t, err, "the CRI plugin's digest reference")
	assert.Equal(t, mustDigest(t, pause), digestRef.Target.Digest.String())

	// Another platform's manifest stays out of the node's store, and no
	// layer is copied.
	armDigest, err := arm64.Digest()
	require.NoError(t, err)
	_, err = db.ContentStore().Info(ctx, digest.Digest(armDigest.String()))
	assert.True(t, errdefs.IsNotFound(err), "arm64's manifest: %v", err)
	layerDigests := map[string]bool{}
	for _, img := range []v1.Image{pause, amd64, arm64} {
		ls, err := img.Layers()
		require.NoError(t, err)
		for _, l := range ls {
			d, err := l.Digest()
			require.NoError(t, err)
			layerDigests[d.String()] = true
		}
	}
	var blobs int
	require.NoError(t, db.ContentStore().Walk(ctx, func(i content.Info) error {
		assert.False(t, layerDigests[i.Digest.String()], "layer %s copied", i.Digest)
		blobs++
		return nil
	}))
	assert.Equal(t, 5, blobs, "pause's manifest and config, flannel's index, amd64 manifest and config")

	// Every snapshot links to the slot.
	var fromSlot int
	require.NoError(t, n.sn.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		assert.Equal(t, "true", i.Labels[snapshotter.LabelFromSlot], "snapshot %s", i.Name)
		fromSlot++
		return nil
	}))
	assert.Equal(t, 3, fromSlot, "pause's layer and flannel's two")
}

func mustDigest(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	require.NoError(t, err)
	return d.String()
}

func TestSeedAgainLeavesWhatContainerdHas(t *testing.T) {
	pause := randomImage(t, 1)
	n := newNode(t, nil, map[string]v1.Image{pauseName: pause})
	_, err := Seed(context.Background(), n.options())
	require.NoError(t, err)

	res, err := Seed(context.Background(), n.options())
	require.NoError(t, err)
	assert.Empty(t, res.Seeded)
	assert.Equal(t, []string{pauseName}, res.Present)
}

func TestSeedSkipsAnImageTheSlotLacksALayerOf(t *testing.T) {
	pause, other := randomImage(t, 1), randomImage(t, 2)
	n := newNode(t, nil, map[string]v1.Image{pauseName: pause, flannelName: other})
	gone := diffIDs(t, other)[1]
	require.NoError(t, os.RemoveAll(filepath.Join(n.slotLayers, "sha256", gone.Encoded())))

	res, err := Seed(context.Background(), n.options())
	require.NoError(t, err)
	assert.Equal(t, []string{pauseName}, res.Seeded)
	require.Contains(t, res.Skipped, flannelName)
	assert.Contains(t, res.Skipped[flannelName], gone.String())

	db := openStore(t, n)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	_, err = metadata.NewImageStore(db).Get(ctx, flannelName)
	assert.True(t, errdefs.IsNotFound(err), "no name for an image that cannot run: %v", err)
	// Nothing was prepared to unpack into: its first layer's snapshot,
	// from the slot, is all the snapshotter holds for it.
	var active int
	require.NoError(t, n.sn.Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		if i.Kind != snapshots.KindCommitted {
			active++
		}
		return nil
	}))
	assert.Zero(t, active)
}

func TestSeedWhileContainerdRunsTouchesNothing(t *testing.T) {
	n := newNode(t, nil, map[string]v1.Image{pauseName: randomImage(t, 1)})
	o := n.options()
	require.NoError(t, os.MkdirAll(filepath.Dir(o.MetaDB), 0o711))
	held, err := bolt.Open(o.MetaDB, 0o644, nil)
	require.NoError(t, err)
	defer held.Close()

	_, err = Seed(context.Background(), o)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrContainerdRunning), "%v", err)
	assert.Contains(t, err.Error(), o.MetaDB)
	entries, err := os.ReadDir(n.containerd)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the metadata store's directory: %v", entries)
}

func TestSeedNamesABrokenBundle(t *testing.T) {
	n := newNode(t, nil, map[string]v1.Image{pauseName: randomImage(t, 1)})
	require.NoError(t, os.WriteFile(filepath.Join(n.bundle, "index.json"), []byte("{"), 0o644))
	_, err := Seed(context.Background(), n.options())
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(n.bundle, "index.json"))
}
