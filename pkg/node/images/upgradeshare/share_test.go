package upgradeshare

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// upgradeFile is a stand-in for an upgrade file: the share never reads
// inside it (the installer checks its signature).
func upgradeFile(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// serve serves the share's directory as the node's registry does: a live
// layout, read again when index.json is replaced.
func serve(t *testing.T, dir string) *httptest.Server {
	t.Helper()
	srv, err := registry.New(registry.WithStores(registry.OpenLiveLayout(dir)))
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs
}

func blobNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestAddServeFetch(t *testing.T) {
	ctx := context.Background()
	a, b := t.TempDir(), t.TempDir()
	hs := serve(t, a) // before anything is in the share

	src, err := Open(a)
	require.NoError(t, err)
	data := upgradeFile(t, 3<<20)
	art, err := src.Add(ctx, bytes.NewReader(data), int64(len(data)), "0.2.0")
	require.NoError(t, err)
	assert.Equal(t, "0.2.0", art.Version)
	assert.EqualValues(t, len(data), art.Size)
	assert.Equal(t, layout.UpgradeRepository+"@"+art.Manifest.String(), art.Ref())
	got, err := os.ReadFile(src.FilePath(art))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the share keeps the file byte for byte")

	// A real registry client reads the artifact the registry serves.
	ref, err := name.NewDigest(strings.TrimPrefix(hs.URL, "http://")+"/"+art.Ref(), name.Insecure)
	require.NoError(t, err)
	desc, err := remote.Get(ref, remote.WithContext(ctx))
	require.NoError(t, err)
	assert.Equal(t, art.Manifest, desc.Digest)
	assert.Contains(t, string(desc.Manifest), `"artifactType":"`+ArtifactType+`"`)
	img, err := desc.Image()
	require.NoError(t, err)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Compressed()
	require.NoError(t, err)
	pulled, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.True(t, bytes.Equal(data, pulled))

	// Another node fetches it from its peer into its own share, by the
	// manifest's digest alone, and then serves it in turn.
	peers, err := registry.NewFetcher([]string{"http://127.0.0.1:1", hs.URL}, nil) // the first peer is down
	require.NoError(t, err)
	dst, err := Open(b)
	require.NoError(t, err)
	fetched, err := dst.Fetch(ctx, peers, art.Manifest)
	require.NoError(t, err)
	assert.Equal(t, art, fetched)
	got, err = os.ReadFile(dst.FilePath(fetched))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))
	again, err := dst.Fetch(ctx, nil, art.Manifest) // held: no peer asked
	require.NoError(t, err)
	assert.Equal(t, art, again)
	list, err := dst.List()
	require.NoError(t, err)
	assert.Equal(t, []Artifact{art}, list)
}

// fakePeers serve a manifest and a blob as given.
type fakePeers struct {
	manifest []byte
	blob     []byte
}

func (f fakePeers) Manifest(_ context.Context, _ string, d v1.Hash) ([]byte, string, error) {
	return f.manifest, "https://10.0.0.11:5443", nil
}

func (f fakePeers) Blob(context.Context, string, string, v1.Hash) (io.ReadCloser, int64, error) {
	return io.NopCloser(bytes.NewReader(f.blob)), int64(len(f.blob)), nil
}

func TestFetchRefusesWhatDoesNotMatch(t *testing.T) {
	ctx := context.Background()
	data := upgradeFile(t, 4096)
	file, _, err := v1.SHA256(bytes.NewReader(data))
	require.NoError(t, err)
	empty, _, _ := v1.SHA256(strings.NewReader(emptyJSON))
	good, err := manifestFor(empty, file, int64(len(data)), "0.2.0")
	require.NoError(t, err)
	gd, _, _ := v1.SHA256(bytes.NewReader(good))

	tampered := append([]byte(nil), data...)
	tampered[100] ^= 1
	notOurs := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}`)
	huge, _ := manifestFor(empty, file, MaxFileSize+1, "0.2.0")
	for _, tt := range []struct {
		name  string
		peers fakePeers
		want  string
	}{
		{"a flipped byte in the file", fakePeers{manifest: good, blob: tampered}, "content does not match its digest"},
		{"a file cut short", fakePeers{manifest: good, blob: data[:100]}, "content does not match its digest"},
		{"an image, not an upgrade", fakePeers{manifest: notOurs, blob: data}, "not an upgrade artifact manifest"},
		{"a file over the cap", fakePeers{manifest: huge, blob: data}, "outside 1.."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			require.NoError(t, err)
			before := blobNames(t, dir)
			_, err = s.Fetch(ctx, tt.peers, gd)
			assert.ErrorContains(t, err, tt.want)
			assert.Equal(t, before, blobNames(t, dir), "nothing kept")
			list, err := s.List()
			require.NoError(t, err)
			assert.Empty(t, list)
		})
	}
}

func TestPruneKeepsOnlyWhatARolloutNeeds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	old, err := s.Add(ctx, bytes.NewReader(upgradeFile(t, 1000)), 1000, "0.2.0")
	require.NoError(t, err)
	cur, err := s.Add(ctx, bytes.NewReader(upgradeFile(t, 1000)), 1000, "0.2.1")
	require.NoError(t, err)
	// The same version again replaces its entry.
	cur2, err := s.Add(ctx, bytes.NewReader(upgradeFile(t, 1000)), 1000, "0.2.1")
	require.NoError(t, err)
	list, err := s.List()
	require.NoError(t, err)
	assert.Equal(t, []Artifact{old, cur2}, list)

	require.NoError(t, s.Prune(cur2.Manifest))
	list, err = s.List()
	require.NoError(t, err)
	assert.Equal(t, []Artifact{cur2}, list)
	assert.ElementsMatch(t, []string{cur2.Manifest.Hex, cur2.File.Hex, emptyHex}, blobNames(t, dir))
	_, ok := s.Find(cur.Manifest)
	assert.False(t, ok)

	before := blobNames(t, dir)
	_, err = s.Add(ctx, bytes.NewReader([]byte("x")), 1, "../0.3")
	assert.ErrorContains(t, err, "cannot be a tag")
	assert.Equal(t, before, blobNames(t, dir), "nothing kept")
}
