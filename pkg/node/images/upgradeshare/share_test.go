package upgradeshare

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// testUpgrade writes a signed upgrade file of version with parts of
// random bytes, the first of n bytes, and returns it verified, with its
// bytes.
func testUpgrade(t *testing.T, version string, n int) (*upgrade.Verified, []byte) {
	t.Helper()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	dir := t.TempDir()
	var parts []upgrade.Part
	for _, p := range []struct {
		name string
		role upgrade.Role
		n    int
	}{{"rootfs.squashfs", upgrade.RoleRootfs, n}, {"vmlinuz", upgrade.RoleKernel, 1000}, {"initrd.img", upgrade.RoleInitramfs, 513}} {
		b := make([]byte, p.n)
		_, err := rand.Read(b)
		require.NoError(t, err)
		path := filepath.Join(dir, p.name)
		require.NoError(t, os.WriteFile(path, b, 0o644))
		parts = append(parts, upgrade.FilePart(p.name, p.role, path))
	}
	var buf bytes.Buffer
	_, err := upgrade.Write(t.Context(), &buf, upgrade.Manifest{Version: version, Compatible: "terrarium", MinFromVersion: "0.1.0",
		KubernetesVersion: "v1.36.3", EtcdVersion: "3.6.4", BuiltAt: "2026-01-01T00:00:00Z"}, parts, key)
	require.NoError(t, err)
	return verified(t, buf.Bytes(), key), buf.Bytes()
}

// verified opens data and checks its signature by key.
func verified(t *testing.T, data []byte, key ed25519.PrivateKey) *upgrade.Verified {
	t.Helper()
	f, err := upgrade.Open(bytes.NewReader(data), int64(len(data)), upgrade.WithName("test.upgrade"))
	require.NoError(t, err)
	v, err := f.VerifySignature([]signature.PublicKey{signature.PublicKeyOf(key)})
	require.NoError(t, err)
	return v
}

// readFile reads the upgrade file of a from s, whole.
func readFile(t *testing.T, s *Share, a Artifact) []byte {
	t.Helper()
	f, err := s.Open(a)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
	require.NoError(t, err)
	return b
}

// serve serves the share's directory as the node's registry does: a live
// layout, read again when index.json is replaced.
func serve(t *testing.T, dir string) *httptest.Server {
	t.Helper()
	srv, err := registry.New(registry.WithReaderCheckedStores(registry.OpenLiveLayout(dir)))
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
	v, data := testUpgrade(t, "0.2.0", 3<<20)
	art, err := src.Add(ctx, v)
	require.NoError(t, err)
	assert.Equal(t, "0.2.0", art.Version)
	assert.EqualValues(t, len(data), art.Size)
	assert.Equal(t, layout.UpgradeRepository+"@"+art.Manifest.String(), art.Ref())
	assert.True(t, bytes.Equal(data, readFile(t, src, art)), "the share reads the file byte for byte")
	f, err := src.Open(art)
	require.NoError(t, err)
	assert.Equal(t, "terrarium-0.2.0.upgrade", f.Name())
	require.NoError(t, f.Close())

	// A real registry client reads the artifact the registry serves: the
	// signed manifest, its signature and the parts, each under the
	// digest the signed manifest gives it.
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
	require.Len(t, layers, 5)
	manifest, sig := v.SignedManifest()
	want := [][]byte{manifest, sig}
	for _, p := range v.Manifest().Parts {
		sr, _, err := v.Part(p.Name)
		require.NoError(t, err)
		b, err := io.ReadAll(sr)
		require.NoError(t, err)
		want = append(want, b)
		d, err := layers[len(want)-1].Digest()
		require.NoError(t, err)
		assert.Equal(t, "sha256:"+p.SHA256, d.String(), "part %s by its signed digest", p.Name)
	}
	for i, l := range layers {
		rc, err := l.Compressed()
		require.NoError(t, err)
		pulled, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		assert.True(t, bytes.Equal(want[i], pulled), "layer %d", i)
	}

	// Another node fetches it from its peer into its own share, by the
	// manifest's digest alone, and then serves it in turn.
	peers, err := registry.NewFetcher([]string{"http://127.0.0.1:1", hs.URL}, nil) // the first peer is down
	require.NoError(t, err)
	dst, err := Open(b)
	require.NoError(t, err)
	fetched, err := dst.Fetch(ctx, peers, art.Manifest)
	require.NoError(t, err)
	assert.Equal(t, art, fetched)
	assert.True(t, bytes.Equal(data, readFile(t, dst, fetched)))
	again, err := dst.Fetch(ctx, nil, art.Manifest) // held: no peer asked
	require.NoError(t, err)
	assert.Equal(t, art, again)
	list, err := dst.List()
	require.NoError(t, err)
	assert.Equal(t, []Artifact{art}, list)
}

// fakePeers serve a manifest from the first peer, and blobs by digest as
// given: the first peer's, and a second peer's when there is one.
type fakePeers struct {
	manifest []byte
	blobs    map[v1.Hash][]byte
	second   map[v1.Hash][]byte
}

const (
	firstPeer  = "https://10.0.0.11:5443"
	secondPeer = "https://10.0.0.12:5443"
)

func (f fakePeers) Manifest(_ context.Context, _ string, d v1.Hash) ([]byte, string, error) {
	return f.manifest, firstPeer, nil
}

func (f fakePeers) Blob(_ context.Context, peer, _ string, d v1.Hash) (io.ReadCloser, int64, error) {
	blobs := f.blobs
	if peer == secondPeer {
		blobs = f.second
	}
	b, ok := blobs[d]
	if !ok {
		return nil, 0, fmt.Errorf("%s: not found", d)
	}
	return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
}

func (f fakePeers) Peers() []string {
	if f.second == nil {
		return []string{firstPeer}
	}
	return []string{firstPeer, secondPeer}
}

// served is what a peer serves of v's artifact: its manifest, its digest
// and its blobs.
func served(t *testing.T, v *upgrade.Verified) (raw []byte, d v1.Hash, blobs map[v1.Hash][]byte) {
	t.Helper()
	src, err := Open(t.TempDir())
	require.NoError(t, err)
	art, err := src.Add(t.Context(), v)
	require.NoError(t, err)
	blobs = map[v1.Hash][]byte{}
	for _, l := range art.layers {
		b, err := os.ReadFile(src.blobPath(l.Digest))
		require.NoError(t, err)
		blobs[l.Digest] = b
	}
	raw, err = os.ReadFile(src.blobPath(art.Manifest))
	require.NoError(t, err)
	return raw, art.Manifest, blobs
}

func TestFetchRefusesWhatDoesNotMatch(t *testing.T) {
	ctx := context.Background()
	v, _ := testUpgrade(t, "0.2.0", 4096)
	good, gd, blobs := served(t, v)
	rootfs := v1.Hash{Algorithm: "sha256", Hex: v.Manifest().Parts[0].SHA256}
	with := func(d v1.Hash, b []byte) map[v1.Hash][]byte {
		out := maps.Clone(blobs)
		out[d] = b
		return out
	}
	flipped := append([]byte(nil), blobs[rootfs]...)
	flipped[100] ^= 1

	notOurs := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}`)
	a, err := parseManifest(good)
	require.NoError(t, err)
	huge := slices.Clone(a.layers)
	huge[2].Size = MaxFileSize
	empty, _, _ := v1.SHA256(strings.NewReader(emptyJSON))
	hugeRaw, err := manifestFor(empty, huge, "0.2.0")
	require.NoError(t, err)
	for _, tt := range []struct {
		name  string
		peers fakePeers
		want  string
	}{
		{"a flipped byte in a part", fakePeers{manifest: good, blobs: with(rootfs, flipped)}, "rootfs.squashfs: from " + firstPeer + ": content does not match its digest"},
		{"a part cut short", fakePeers{manifest: good, blobs: with(rootfs, blobs[rootfs][:100])}, "content does not match its digest: it ended after 100 of its 4096 bytes"},
		{"an image, not an upgrade", fakePeers{manifest: notOurs, blobs: blobs}, "not an upgrade artifact manifest"},
		{"a file over the cap", fakePeers{manifest: hugeRaw, blobs: blobs}, "outside 1.."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			require.NoError(t, err)
			_, err = s.Fetch(ctx, tt.peers, gd)
			assert.ErrorContains(t, err, tt.want)
			assert.NotContains(t, blobNames(t, dir), rootfs.Hex, "what does not match is not kept")
			list, err := s.List()
			require.NoError(t, err)
			assert.Empty(t, list)
		})
	}
}

// A part one peer holds corrupt (its registry serves the share as it is
// on disk) is fetched from the next peer; with no other peer, the fetch
// fails naming the peer.
func TestFetchPassesOverAPeerWithACorruptPart(t *testing.T) {
	ctx := context.Background()
	v, data := testUpgrade(t, "0.2.0", 4096)
	raw, d, blobs := served(t, v)
	rootfs := v1.Hash{Algorithm: "sha256", Hex: v.Manifest().Parts[0].SHA256}
	corrupt := maps.Clone(blobs)
	corrupt[rootfs] = slices.Clone(blobs[rootfs])
	corrupt[rootfs][7] ^= 1

	s, err := Open(t.TempDir())
	require.NoError(t, err)
	_, err = s.Fetch(ctx, fakePeers{manifest: raw, blobs: corrupt}, d)
	require.ErrorIs(t, err, ErrDigest)
	assert.ErrorContains(t, err, "rootfs.squashfs: from "+firstPeer+": content does not match its digest")

	a, err := s.Fetch(ctx, fakePeers{manifest: raw, blobs: corrupt, second: blobs}, d)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, readFile(t, s, a)))
}

// A fetch cut off after some blobs keeps those that matched, and the
// next one fetches only what is missing.
func TestFetchAgainFetchesOnlyWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	v, data := testUpgrade(t, "0.2.0", 4096)
	raw, d, blobs := served(t, v)
	last := v1.Hash{Algorithm: "sha256", Hex: v.Manifest().Parts[2].SHA256}
	s, err := Open(t.TempDir())
	require.NoError(t, err)
	partial := maps.Clone(blobs)
	delete(partial, last)
	_, err = s.Fetch(ctx, fakePeers{manifest: raw, blobs: partial}, d)
	require.ErrorContains(t, err, "initrd.img")
	_, ok := s.Find(d)
	assert.False(t, ok, "not held whole")

	only := map[v1.Hash][]byte{last: blobs[last]}
	a, err := s.Fetch(ctx, fakePeers{manifest: raw, blobs: only}, d)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, readFile(t, s, a)))
}

// A stick's part that differs from its signed manifest is refused by name
// as it is copied, and the share keeps nothing of it.
func TestAddRefusesAPartThatDiffers(t *testing.T) {
	_, data := testUpgrade(t, "0.2.0", 4096)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	v := verified(t, data, key)
	for _, p := range v.Manifest().Parts {
		t.Run(p.Name, func(t *testing.T) {
			sr, _, err := v.Part(p.Name)
			require.NoError(t, err)
			bad := slices.Clone(data)
			bad[sr.Size()/2+partOffset(t, sr)] ^= 1
			dir := t.TempDir()
			s, err := Open(dir)
			require.NoError(t, err)
			before := blobNames(t, dir)
			_, err = s.Add(t.Context(), verified(t, bad, key))
			require.ErrorIs(t, err, ErrDigest)
			assert.ErrorContains(t, err, "add upgrade 0.2.0 to the share: part "+p.Name+" differs from its signed manifest")
			assert.Equal(t, before, blobNames(t, dir), "nothing kept")
			list, err := s.List()
			require.NoError(t, err)
			assert.Empty(t, list)
		})
	}
}

// partOffset is where the section sr starts in its file.
func partOffset(t *testing.T, sr *io.SectionReader) int64 {
	t.Helper()
	_, off, _ := sr.Outer()
	return off
}

func TestPruneKeepsOnlyWhatARolloutNeeds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	v1a, _ := testUpgrade(t, "0.2.0", 1000)
	old, err := s.Add(ctx, v1a)
	require.NoError(t, err)
	v2a, _ := testUpgrade(t, "0.2.1", 1000)
	cur, err := s.Add(ctx, v2a)
	require.NoError(t, err)
	// The same version again replaces its entry.
	v2b, _ := testUpgrade(t, "0.2.1", 1000)
	cur2, err := s.Add(ctx, v2b)
	require.NoError(t, err)
	list, err := s.List()
	require.NoError(t, err)
	assert.Equal(t, []Artifact{old, cur2}, list)

	require.NoError(t, s.Prune(cur2.Manifest))
	list, err = s.List()
	require.NoError(t, err)
	assert.Equal(t, []Artifact{cur2}, list)
	want := []string{cur2.Manifest.Hex, emptyHex}
	for _, l := range cur2.layers {
		want = append(want, l.Digest.Hex)
	}
	assert.ElementsMatch(t, want, blobNames(t, dir))
	_, ok := s.Find(cur.Manifest)
	assert.False(t, ok)

}

// A version is an OCI tag, or the share names nothing by it.
func TestValidTag(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{{"0.2.0", true}, {"0.2.0-rc.1", true}, {"../0.3", false}, {"", false}, {".0", false}, {strings.Repeat("1", 129), false}} {
		assert.Equal(t, tc.ok, validTag(tc.version), tc.version)
	}
}

// An artifact an earlier version made, the upgrade file whole in one
// layer, is read, listed and pruned as before.
func TestWholeFileArtifactOfAnEarlierVersion(t *testing.T) {
	_, data := testUpgrade(t, "0.2.0", 4096)
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	d, n, err := s.putBlob(t.Context(), bytes.NewReader(data), nil, int64(len(data)))
	require.NoError(t, err)
	art, err := s.record([]v1.Descriptor{{MediaType: FileMediaType, Digest: d, Size: n}}, "0.2.0")
	require.NoError(t, err)
	found, ok := s.Find(art.Manifest)
	require.True(t, ok)
	assert.EqualValues(t, len(data), found.Size)
	assert.True(t, bytes.Equal(data, readFile(t, s, found)))
	require.NoError(t, s.Prune(art.Manifest))
	assert.ElementsMatch(t, []string{art.Manifest.Hex, d.Hex, emptyHex}, blobNames(t, dir))
}

// An artifact whose part layers say otherwise than its signed manifest
// (another part's digest, the parts reordered) is not opened.
func TestOpenRefusesPartsOtherThanTheSignedManifests(t *testing.T) {
	v, _ := testUpgrade(t, "0.2.0", 4096)
	s, err := Open(t.TempDir())
	require.NoError(t, err)
	art, err := s.Add(t.Context(), v)
	require.NoError(t, err)
	swapped := slices.Clone(art.layers)
	swapped[2], swapped[3] = swapped[3], swapped[2]
	bad, err := s.record(swapped, "0.2.0")
	require.NoError(t, err)
	_, err = s.Open(bad)
	assert.ErrorContains(t, err, "open upgrade 0.2.0 in the share: assemble upgrade file: part rootfs.squashfs: the artifact's part 1 is vmlinuz")
	short := slices.Clone(art.layers[:4])
	bad, err = s.record(short, "0.2.0")
	require.NoError(t, err)
	_, err = s.Open(bad)
	assert.ErrorContains(t, err, "the artifact has 2 parts and its signed manifest more")
	long := append(slices.Clone(art.layers), art.layers[4])
	bad, err = s.record(long, "0.2.0")
	require.NoError(t, err)
	_, err = s.Open(bad)
	assert.ErrorContains(t, err, "the artifact has 4 parts and its signed manifest 3")
}

// AddWhole keeps the file whole in one layer, as earlier versions did and
// as their nodes read it, checking every part as it reads the file once:
// a part that differs (here the last) is refused by name with nothing
// kept.
func TestAddWholeForAnEarlierVersion(t *testing.T) {
	v, data := testUpgrade(t, "0.2.0", 4096)
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	art, err := s.AddWhole(t.Context(), v)
	require.NoError(t, err)
	require.True(t, art.whole())
	assert.Equal(t, FileMediaType, art.layers[0].MediaType)
	assert.EqualValues(t, len(data), art.Size)
	got, err := os.ReadFile(s.blobPath(art.layers[0].Digest))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the blob is the file byte for byte")
	assert.Equal(t, fmt.Sprintf("%x", sha256.Sum256(data)), art.layers[0].Digest.Hex)

	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	bad := slices.Clone(data)
	sr, _, err := v.Part("initrd.img")
	require.NoError(t, err)
	bad[partOffset(t, sr)+10] ^= 1
	dir = t.TempDir()
	s, err = Open(dir)
	require.NoError(t, err)
	before := blobNames(t, dir)
	_, err = s.AddWhole(t.Context(), verified(t, bad, key))
	require.ErrorIs(t, err, upgrade.ErrHashMismatch)
	assert.ErrorContains(t, err, "add upgrade 0.2.0 to the share: part initrd.img differs from its signed manifest")
	assert.Equal(t, before, blobNames(t, dir), "nothing kept of the file read up to its last part")
	assert.Empty(t, tempFiles(t, dir))
}

// tempFiles are the blobs being written in dir's share.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range blobNames(t, dir) {
		if strings.HasPrefix(n, ".in-") {
			out = append(out, n)
		}
	}
	return out
}

// failingWriter fails every write after its first n bytes.
type failingWriter struct {
	n     int
	got   bytes.Buffer
	calls int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.calls++
	if f.got.Len()+len(p) > f.n {
		return 0, errors.New("the slot is gone")
	}
	return f.got.Write(p)
}

// TestAddTeesAPart: a tee gets the part from the same reads, the share
// reads it back from its blob, and a tee that fails stops only itself.
func TestAddTeesAPart(t *testing.T) {
	v, data := testUpgrade(t, "0.2.0", 3<<20+17)
	want, err := io.ReadAll(mustPart(t, v, "rootfs.squashfs"))
	require.NoError(t, err)

	s, err := Open(t.TempDir())
	require.NoError(t, err)
	var tee bytes.Buffer
	a, err := s.Add(t.Context(), v, teeTo("rootfs.squashfs", &tee))
	require.NoError(t, err)
	assert.Equal(t, want, tee.Bytes())
	assert.Equal(t, want, readPart(t, s, a, "rootfs.squashfs"))
	assert.Equal(t, data, readFile(t, s, a), "the artifact is the file, its layers in the manifest's order")
	_, err = s.ReadBack(a, "nothing.img")
	assert.ErrorContains(t, err, "read back part nothing.img of upgrade 0.2.0: the artifact has no such part")

	t.Run("a tee that fails", func(t *testing.T) {
		s, err := Open(t.TempDir())
		require.NoError(t, err)
		fw := &failingWriter{n: 1 << 20}
		a, err := s.Add(t.Context(), v, teeTo("rootfs.squashfs", fw))
		require.NoError(t, err, "the share's copy goes on")
		assert.Equal(t, want[:1<<20], fw.got.Bytes(), "its first MiB")
		assert.Equal(t, 2, fw.calls, "the write that failed, and none after it")
		assert.Equal(t, want, readPart(t, s, a, "rootfs.squashfs"))
	})

	for _, tc := range []struct {
		part   string
		opened bool
	}{{"rootfs.squashfs", true}, {"vmlinuz", false}, {"initrd.img", false}} {
		t.Run("a part that differs: "+tc.part, func(t *testing.T) {
			_, data := testUpgrade(t, "0.2.0", 4096)
			key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
			sr := mustPart(t, verified(t, data, key), tc.part)
			data[partOffset(t, sr)+100] ^= 1
			s, err := Open(t.TempDir())
			require.NoError(t, err)
			var tee bytes.Buffer
			opened := false
			_, err = s.Add(t.Context(), verified(t, data, key), Tee{Part: "rootfs.squashfs", Open: func() io.Writer { opened = true; return &tee }})
			require.ErrorIs(t, err, ErrDigest)
			assert.ErrorContains(t, err, "part "+tc.part+" differs from its signed manifest")
			if !tc.opened {
				assert.False(t, opened, "every other part is checked before the tee is opened")
				return
			}
			assert.True(t, opened)
			assert.Equal(t, 4096, tee.Len(), "written before the part was known to differ")
		})
	}
}

// teeTo is a tee of part into w.
func teeTo(part string, w io.Writer) Tee {
	return Tee{Part: part, Open: func() io.Writer { return w }}
}

// mustPart is v's part name.
func mustPart(t *testing.T, v *upgrade.Verified, name string) *io.SectionReader {
	t.Helper()
	sr, _, err := v.Part(name)
	require.NoError(t, err)
	return sr
}

// readPart reads a's part name back from s.
func readPart(t *testing.T, s *Share, a Artifact, name string) []byte {
	t.Helper()
	rc, err := s.ReadBack(a, name)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// TestAddServingNamesTheArtifactBeforeItsLastPart: named is called with
// the artifact named in index.json while its last part (the teed one)
// is not yet copied and grows under its growing name; a copy that then
// fails leaves nothing named and nothing kept.
func TestAddServingNamesTheArtifactBeforeItsLastPart(t *testing.T) {
	v, data := testUpgrade(t, "0.2.0", 3<<20+17)
	rootfs := mustPart(t, v, "rootfs.squashfs")
	var rootfsDigest string
	for _, p := range v.Manifest().Parts {
		if p.Name == "rootfs.squashfs" {
			rootfsDigest = p.SHA256
		}
	}
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	var named []Artifact
	var tee bytes.Buffer
	a, err := s.AddServing(t.Context(), v, func(a Artifact) error {
		named = append(named, a)
		list, err := s.List()
		require.NoError(t, err)
		require.Len(t, list, 1, "named in index.json")
		assert.Equal(t, a.Manifest, list[0].Manifest)
		_, ok := s.Find(a.Manifest)
		assert.False(t, ok, "not held whole yet")
		assert.Contains(t, blobNames(t, dir), registry.GrowingName(rootfsDigest, rootfs.Size()), "there to be served before it is named")
		assert.Zero(t, tee.Len(), "the teed part is the last, not begun")
		return nil
	}, teeTo("rootfs.squashfs", &tee))
	require.NoError(t, err)
	require.Len(t, named, 1)
	assert.Equal(t, named[0].Manifest, a.Manifest)
	_, ok := s.Find(a.Manifest)
	assert.True(t, ok)
	assert.Equal(t, data, readFile(t, s, a))
	assert.Equal(t, int(rootfs.Size()), tee.Len())
	assert.NotContains(t, strings.Join(blobNames(t, dir), " "), registry.GrowingPrefix, "renamed into place")
	assert.Contains(t, blobNames(t, dir), rootfsDigest)

	t.Run("a last part that differs", func(t *testing.T) {
		_, data := testUpgrade(t, "0.3.0", 4096)
		key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
		sr := mustPart(t, verified(t, data, key), "rootfs.squashfs")
		data[partOffset(t, sr)+100] ^= 1
		dir := t.TempDir()
		s, err := Open(dir)
		require.NoError(t, err)
		before := blobNames(t, dir)
		calls := 0
		_, err = s.AddServing(t.Context(), verified(t, data, key), func(Artifact) error { calls++; return nil }, teeTo("rootfs.squashfs", io.Discard))
		require.ErrorIs(t, err, ErrDigest)
		assert.Equal(t, 1, calls, "named before the part was known to differ")
		list, err := s.List()
		require.NoError(t, err)
		assert.Empty(t, list, "named no more")
		assert.Equal(t, before, withoutEmpty(blobNames(t, dir)), "nothing kept but the empty config")
	})

	t.Run("named fails", func(t *testing.T) {
		v, _ := testUpgrade(t, "0.4.0", 4096)
		dir := t.TempDir()
		s, err := Open(dir)
		require.NoError(t, err)
		before := blobNames(t, dir)
		_, err = s.AddServing(t.Context(), v, func(Artifact) error { return errors.New("the API is down") })
		require.ErrorContains(t, err, "the API is down")
		list, err := s.List()
		require.NoError(t, err)
		assert.Empty(t, list)
		assert.Equal(t, before, withoutEmpty(blobNames(t, dir)))
	})
}

// withoutEmpty drops the empty config's blob, which the share keeps.
func withoutEmpty(names []string) []string {
	var out []string
	for _, n := range names {
		if n != emptyHex {
			out = append(out, n)
		}
	}
	return out
}

// TestAddServingIsReadWhileItCopies: a peer's read of the last part
// through the node's registry, begun once the artifact is named, gets it
// whole as the share copies it: its writer lets go only once it wrote
// the last byte.
func TestAddServingIsReadWhileItCopies(t *testing.T) {
	v, _ := testUpgrade(t, "0.2.0", 3<<20+17)
	rootfs := mustPart(t, v, "rootfs.squashfs")
	want, err := io.ReadAll(io.NewSectionReader(rootfs, 0, rootfs.Size()))
	require.NoError(t, err)
	var d v1.Hash
	for _, p := range v.Manifest().Parts {
		if p.Name == "rootfs.squashfs" {
			d = v1.Hash{Algorithm: "sha256", Hex: p.SHA256}
		}
	}
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	store := registry.OpenLiveLayout(dir)
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	_, err = s.AddServing(t.Context(), v, func(Artifact) error {
		c, err := store.Open(t.Context(), d)
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			b, err := io.ReadAll(c.Body)
			got <- read{b, err}
		}()
		return nil
	}, teeTo("rootfs.squashfs", io.Discard))
	require.NoError(t, err)
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, want, r.b)
}
