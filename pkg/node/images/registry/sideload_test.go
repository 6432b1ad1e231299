package registry

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	// apiserverRef is a tag of the slot's bundle in these tests.
	apiserverRef = "registry.k8s.io/kube-apiserver:v1.36.3"
	// extraRef is the image a side-load disk brings.
	extraRef = "quay.io/extra/app:1"
)

// slotNode is a node's registry: the slot's bundle (the fixture, plus
// kube-apiserver), a cache that knows it (WithBundle), and a server over
// both.
type slotNode struct {
	f         *fixture
	apiserver v1.Image
	cache     *Cache
	url       string
}

func newSlotNode(t *testing.T) *slotNode {
	t.Helper()
	n := &slotNode{}
	n.f, n.apiserver = slotBundle(t)
	slot, err := OpenLayout(n.f.dir)
	require.NoError(t, err)
	log, _ := testLogger(t)
	n.cache, err = OpenCache(filepath.Join(t.TempDir(), "cache"), WithLogger(log), WithBundle(slot))
	require.NoError(t, err)
	srv, _, _ := startServer(t, WithStores(slot), WithCache(n.cache))
	n.url = srv.URL
	return n
}

// slotBundle is the slot's bundle of these tests: the fixture, plus
// kube-apiserver under apiserverRef.
func slotBundle(t testing.TB) (*fixture, v1.Image) {
	t.Helper()
	f, apiserver := newFixture(t), ociImage(t, "amd64", 1, 1000)
	p, err := layout.FromPath(f.dir)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(apiserver, layout.WithAnnotations(refAnnotations(apiserverRef))))
	return f, apiserver
}

// manifestDigest GETs a manifest and returns its Docker-Content-Digest.
func (n *slotNode) manifestDigest(t *testing.T, path string) string {
	t.Helper()
	resp, body := do(t, http.MethodGet, n.url+path, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	return resp.Header.Get("Docker-Content-Digest")
}

// stillServes checks the slot's images are served as before.
func (n *slotNode) stillServes(t *testing.T) {
	t.Helper()
	assert.Equal(t, digestOf(t, n.f.hello).String(), n.manifestDigest(t, "/v2/library/hello/manifests/1.0?ns=docker.io"))
	assert.Equal(t, digestOf(t, n.apiserver).String(), n.manifestDigest(t, "/v2/kube-apiserver/manifests/v1.36.3?ns=registry.k8s.io"))
	assert.Equal(t, digestOf(t, n.apiserver).String(), n.manifestDigest(t, "/v2/kube-apiserver/manifests/v1.36.3"))
}

// nothingAdded checks the cache holds nothing, on disk too.
func (n *slotNode) nothingAdded(t *testing.T) {
	t.Helper()
	repos, err := n.cache.Repositories(context.Background())
	require.NoError(t, err)
	assert.Empty(t, repos)
	assert.Empty(t, blobFiles(t, n.cache.Dir()))
	reopened, err := OpenCache(n.cache.Dir())
	require.NoError(t, err)
	repos, err = reopened.Repositories(context.Background())
	require.NoError(t, err)
	assert.Empty(t, repos, "index.json records names")
}

// sideloadLayout writes a side-load layout holding imgs under their refs.
func sideloadLayout(t *testing.T, imgs map[string]v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	for _, ref := range slices.Sorted(func(yield func(string) bool) {
		for r := range imgs {
			if !yield(r) {
				return
			}
		}
	}) {
		require.NoError(t, p.AppendImage(imgs[ref], layout.WithAnnotations(refAnnotations(ref))))
	}
	return dir
}

// blobFile is the file of blob d in a layout.
func blobFile(dir string, d v1.Hash) string {
	return filepath.Join(dir, "blobs", d.Algorithm, d.Hex)
}

func configDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.ConfigName()
	require.NoError(t, err)
	return d
}

// TestSideloadRefusals: each hostile side-load disk is refused with its
// named error, nothing is added to the cache, and the registry still
// serves the slot's images.
func TestSideloadRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		// disk returns the layout directory to side-load, given the
		// slot's node (for its digests).
		disk func(t *testing.T, n *slotNode) string
		want error
	}{{
		name: "index.json is a symlink to /dev/zero",
		disk: func(t *testing.T, _ *slotNode) string {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			index := filepath.Join(dir, "index.json")
			require.NoError(t, os.Remove(index))
			require.NoError(t, os.Symlink("/dev/zero", index))
			return dir
		},
		want: ErrSideloadOutside,
	}, {
		name: "index.json is a FIFO",
		disk: func(t *testing.T, _ *slotNode) string {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			index := filepath.Join(dir, "index.json")
			require.NoError(t, os.Remove(index))
			require.NoError(t, syscall.Mkfifo(index, 0o644))
			return dir
		},
		want: ErrSideloadNotRegular,
	}, {
		name: "index.json is 10 GiB (sparse)",
		disk: func(t *testing.T, _ *slotNode) string {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			require.NoError(t, os.Truncate(filepath.Join(dir, "index.json"), 10<<30))
			return dir
		},
		want: ErrSideloadTooLarge,
	}, {
		name: "a blob is a symlink to an intact copy outside the layout",
		disk: func(t *testing.T, _ *slotNode) string {
			img := ociImage(t, "amd64", 1, 100)
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: img})
			path, _ := layerPath(t, dir, img)
			outside := filepath.Join(t.TempDir(), "blob")
			require.NoError(t, os.Rename(path, outside))
			require.NoError(t, os.Symlink(outside, path))
			return dir
		},
		want: ErrSideloadOutside,
	}, {
		name: "a blob is a relative symlink climbing out of the layout",
		disk: func(t *testing.T, _ *slotNode) string {
			img := ociImage(t, "amd64", 1, 100)
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: img})
			path, _ := layerPath(t, dir, img)
			require.NoError(t, os.Rename(path, filepath.Join(dir, "..", "blob")))
			require.NoError(t, os.Symlink("../../../blob", path))
			return dir
		},
		want: ErrSideloadOutside,
	}, {
		name: "the blobs directory is a symlink out of the layout",
		disk: func(t *testing.T, _ *slotNode) string {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			outside := filepath.Join(t.TempDir(), "blobs")
			require.NoError(t, os.Rename(filepath.Join(dir, "blobs"), outside))
			require.NoError(t, os.Symlink(outside, filepath.Join(dir, "blobs")))
			return dir
		},
		want: ErrSideloadOutside,
	}, {
		name: "the layout directory is a symlink",
		disk: func(t *testing.T, _ *slotNode) string {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			link := filepath.Join(t.TempDir(), "bundle")
			require.NoError(t, os.Symlink(dir, link))
			return link
		},
		want: ErrSideloadOutside,
	}, {
		name: "a manifest larger than the cap",
		disk: func(t *testing.T, _ *slotNode) string {
			img := mutate.Annotations(ociImage(t, "amd64", 1, 100),
				map[string]string{"pad": strings.Repeat("x", sideloadManifestMax)}).(v1.Image)
			return sideloadLayout(t, map[string]v1.Image{extraRef: img})
		},
		want: ErrSideloadTooLarge,
	}, {
		name: "a config larger than the cap",
		disk: func(t *testing.T, _ *slotNode) string {
			img := ociImage(t, "amd64", 1, 100)
			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			cfg = cfg.DeepCopy()
			cfg.Config.Labels = map[string]string{"pad": strings.Repeat("x", sideloadConfigMax)}
			img, err = mutate.ConfigFile(img, cfg)
			require.NoError(t, err)
			return sideloadLayout(t, map[string]v1.Image{extraRef: img})
		},
		want: ErrSideloadTooLarge,
	}, {
		name: "a blob larger than its descriptor",
		disk: func(t *testing.T, _ *slotNode) string {
			img := ociImage(t, "amd64", 1, 100)
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: img})
			path, _ := layerPath(t, dir, img)
			require.NoError(t, os.Chmod(path, 0o644))
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte("more"))
			require.NoError(t, err)
			require.NoError(t, f.Close())
			return dir
		},
		want: ErrSideloadTooLarge,
	}, {
		name: "a config that is a FIFO",
		disk: func(t *testing.T, _ *slotNode) string {
			img := ociImage(t, "amd64", 1, 100)
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: img})
			path := blobFile(dir, configDigest(t, img))
			require.NoError(t, os.Remove(path))
			require.NoError(t, syscall.Mkfifo(path, 0o644))
			return dir
		},
		want: ErrSideloadNotRegular,
	}, {
		name: "a bundle re-tagging kube-apiserver of the slot with another digest",
		disk: func(t *testing.T, _ *slotNode) string {
			return sideloadLayout(t, map[string]v1.Image{
				extraRef:     ociImage(t, "amd64", 1, 100), // fine on its own: refused with the disk
				apiserverRef: ociImage(t, "amd64", 1, 1000),
			})
		},
		want: ErrShadowsBundle,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newSlotNode(t)
			dir := tc.disk(t, n)
			refs, err := n.cache.AddLayout(context.Background(), dir)
			require.ErrorIs(t, err, tc.want)
			t.Log(err)
			assert.Empty(t, refs)
			assert.Contains(t, err.Error(), dir, "the error names the file")
			n.nothingAdded(t)
			n.stillServes(t)
		})
	}
}

// A side-load may carry a tag of the slot's bundle with the same digest: it
// is skipped (the slot serves it), the rest is added.
func TestSideloadSameDigestAsBundleIsSkipped(t *testing.T) {
	n := newSlotNode(t)
	extra := ociImage(t, "amd64", 1, 100)
	dir := sideloadLayout(t, map[string]v1.Image{extraRef: extra, apiserverRef: n.apiserver})
	refs, err := n.cache.AddLayout(context.Background(), dir)
	require.NoError(t, err)
	assert.Equal(t, []string{extraRef}, refs)
	_, err = n.cache.Resolve(context.Background(), "registry.k8s.io/kube-apiserver", "v1.36.3")
	require.ErrorIs(t, err, ErrNotFound, "the cache does not record the slot's tag")
	assert.Equal(t, digestOf(t, extra).String(), n.manifestDigest(t, "/v2/extra/app/manifests/1?ns=quay.io"))
	n.stillServes(t)
}

// A symlink that stays inside the layout is followed (os.Root semantics).
func TestSideloadSymlinkInsideIsFollowed(t *testing.T) {
	n := newSlotNode(t)
	img := ociImage(t, "amd64", 1, 100)
	dir := sideloadLayout(t, map[string]v1.Image{extraRef: img})
	path, _ := layerPath(t, dir, img)
	require.NoError(t, os.Rename(path, filepath.Join(dir, "layer")))
	require.NoError(t, os.Symlink("../../layer", path))
	refs, err := n.cache.AddLayout(context.Background(), dir)
	require.NoError(t, err)
	assert.Equal(t, []string{extraRef}, refs)
}

// Add refuses a tag of the slot's bundle with another digest too.
func TestAddShadowingBundleIsRefused(t *testing.T) {
	n := newSlotNode(t)
	src, err := OpenLayout(sideloadLayout(t, map[string]v1.Image{apiserverRef: ociImage(t, "amd64", 1, 1000)}))
	require.NoError(t, err)
	_, err = n.cache.Add(context.Background(), src, "registry.k8s.io/kube-apiserver", "v1.36.3")
	require.ErrorIs(t, err, ErrShadowsBundle)
	n.nothingAdded(t)
}

// TestSlotBundleWinsOverCache pins the lookup order: a tag is resolved from
// the slot's bundle (the stores) before the cache, whatever the cache holds
// and whatever the order of the options; a short name resolves to the
// slot's repository even when the cache holds another with the same path.
func TestSlotBundleWinsOverCache(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	slot, err := OpenLayout(f.dir)
	require.NoError(t, err)
	c := openCache(t) // no WithBundle: the cache itself lets the tag in
	other := ociImage(t, "amd64", 1, 100)
	_, err = c.AddImage(ctx, helloRef, other)
	require.NoError(t, err)
	_, err = c.AddImage(ctx, "evil.example/library/hello:1.0", other)
	require.NoError(t, err)

	for _, opts := range [][]Option{
		{WithStores(slot), WithCache(c)},
		{WithCache(c), WithStores(slot)},
		{WithCache(c), WithStores(c, slot)}, // the cache named as a store still comes last
	} {
		srv, _, _ := startServer(t, opts...)
		for _, path := range []string{
			"/v2/library/hello/manifests/1.0?ns=docker.io",
			"/v2/docker.io/library/hello/manifests/1.0",
			"/v2/library/hello/manifests/1.0",
		} {
			resp, body := do(t, http.MethodGet, srv.URL+path, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
			assert.Equal(t, digestOf(t, f.hello).String(), resp.Header.Get("Docker-Content-Digest"), path)
		}
	}
}

func TestWithBundleOnlyForOpenCache(t *testing.T) {
	f := newFixture(t)
	slot, err := OpenLayout(f.dir)
	require.NoError(t, err)
	_, err = New(WithStores(slot), WithBundle(slot))
	assert.ErrorContains(t, err, "only apply to OpenCache")
	_, err = OpenLayout(f.dir, WithBundle(slot))
	assert.ErrorContains(t, err, "only apply to OpenCache")
	_, err = OpenCache(t.TempDir(), WithBundle(nil))
	assert.Error(t, err)
}
