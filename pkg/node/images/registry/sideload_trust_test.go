package registry

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clayout "github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// signLayout signs a layout's index.json for bundles with key.
func signLayout(t *testing.T, dir string, key ed25519.PrivateKey) {
	t.Helper()
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, clayout.BundleIndexSignature), signature.SignFor(signature.PurposeBundle, key, index), 0o644))
}

// replacingLayout is a side-load layout holding img as ref, its entry
// marked replacing (clayout.BundleReplacesAnnotation) when replaces is set,
// with generation 1.
func replacingLayout(t *testing.T, ref string, img v1.Image, replaces bool) string {
	t.Helper()
	if replaces {
		return generationLayout(t, ref, img, "1")
	}
	return generationLayout(t, ref, img, "")
}

// generationLayout is a side-load layout holding img as ref; with a
// generation ("": none), its entry says it replaces the tag, with that
// generation (clayout.BundleGenerationAnnotation; "-" marks it replacing
// without one).
func generationLayout(t *testing.T, ref string, img v1.Image, generation string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	ann := refAnnotations(ref)
	if generation != "" {
		ann[clayout.BundleReplacesAnnotation] = "true"
	}
	if generation != "" && generation != "-" {
		ann[clayout.BundleGenerationAnnotation] = generation
	}
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(ann)))
	return dir
}

// TestSideloadTagMoves: a side-load never moves a tag the cache has to
// another digest, unless it is signed by a trusted key and says it
// replaces the tag; then the old digest is reported.
func TestSideloadTagMoves(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	trusted := []AddOption{SignedBy([]signature.PublicKey{pub})}
	for _, tc := range []struct {
		name     string
		replaces bool // the new bundle's entry says it replaces the tag
		signed   bool // the new bundle is signed by the trusted key
		same     bool // the new bundle has the image the cache has
		opts     []AddOption
		want     []string // parts of the refusal; none: taken
	}{{
		name: "unsigned, on a node that trusts no key",
		want: []string{"give the new image another tag", "it trusts no key"},
	}, {
		name: "unsigned, marked replacing, on a node that trusts no key", replaces: true,
		want: []string{"marks it replaced (dev.terrarium.replaces), which counts only in a signed bundle"},
	}, {
		name: "signed by a trusted key, not marked replacing", signed: true, opts: trusted,
		want: []string{"mark the tag replaced in the bundle: imagebuild bundle disk --sign KEY --replace-tags REPOSITORY:TAG"},
	}, {
		name: "signed by a trusted key and marked replacing", signed: true, replaces: true, opts: trusted,
	}, {
		name: "the same image again, unsigned", same: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := openCache(t)
			old := ociImage(t, "amd64", 1, 100)
			_, err := c.AddLayout(ctx, sideloadLayout(t, map[string]v1.Image{extraRef: old}))
			require.NoError(t, err, "the first side-load")

			img := ociImage(t, "amd64", 1, 100)
			if tc.same {
				img = old
			}
			dir := replacingLayout(t, extraRef, img, tc.replaces)
			if tc.signed {
				signLayout(t, dir, key)
			}
			res, err := c.Sideload(ctx, dir, tc.opts...)
			resolved, rerr := c.Resolve(ctx, "quay.io/extra/app", "1")
			require.NoError(t, rerr)
			if tc.want != nil {
				require.ErrorIs(t, err, ErrSideloadMovesTag)
				t.Log(err)
				msg := err.Error()
				assert.Contains(t, msg, extraRef+" is "+digestOf(t, old).String()+" on this node and "+digestOf(t, img).String()+" in the bundle",
					"the refusal names the tag, the old digest and the new")
				for _, w := range tc.want {
					assert.Contains(t, msg, w)
				}
				assert.Empty(t, res.Added)
				assert.Equal(t, digestOf(t, old), resolved.Digest, "the tag did not move")
				assert.False(t, c.Has(configDigest(t, img)), "nothing of the new image was added")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{extraRef}, res.Added)
			assert.Equal(t, digestOf(t, img), resolved.Digest)
			if tc.same {
				assert.Empty(t, res.Replaced)
				return
			}
			assert.Equal(t, []ReplacedTag{{Ref: extraRef, Old: digestOf(t, old), New: digestOf(t, img), Generation: 1}}, res.Replaced)
			assert.True(t, res.Signed)
			assert.Equal(t, pub, res.Signer)
			reopened, err := OpenCache(c.Dir())
			require.NoError(t, err)
			d, err := reopened.Resolve(ctx, "quay.io/extra/app", "1")
			require.NoError(t, err)
			assert.Equal(t, digestOf(t, img), d.Digest, "index.json records the move")
		})
	}
}

// A tag that changes between the plan and the record (a peer's fill of
// the same name) is not moved either.
func TestSideloadTagChangedWhileCopying(t *testing.T) {
	c := openCache(t)
	ctx := context.Background()
	img := ociImage(t, "amd64", 1, 100)
	was := v1.Hash{}
	_, err := c.AddImage(ctx, extraRef, ociImage(t, "amd64", 1, 100))
	require.NoError(t, err)
	err = c.record(record{repo: "quay.io/extra/app", tag: "1", desc: v1.Descriptor{Digest: digestOf(t, img), MediaType: types.OCIManifestSchema1}, ifWas: &was})
	require.ErrorIs(t, err, ErrSideloadMovesTag)
	assert.ErrorContains(t, err, "quay.io/extra/app:1 changed to sha256:")
	assert.ErrorContains(t, err, "while it was copied (it was no image)")
}

// The refusals of an unsigned bundle say what to do, for a node that
// trusts keys for bundles and for one that trusts none for bundles (its
// keys sign configs only).
func TestSideloadUnsignedSaysWhy(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		keys []signature.PublicKey
		sign bool
		want []string
	}{
		{"unsigned; the node trusts a key for bundles", []signature.PublicKey{pub}, false,
			[]string{"index.json: unsigned (no index.json.sig beside it)", ErrSideloadUnsigned.Error(), "KEY one this node trusts for bundles (" + pub.ID() + ")"}},
		{"signed by a key the node trusts for configs only", nil, true,
			[]string{"signed by key " + pub.ID() + " (" + pub.String() + "), which this node does not trust for bundles", "this node trusts no key for bundles", "purposes: [bundle]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			if tc.sign {
				signLayout(t, dir, key)
			}
			c := openCache(t)
			refs, err := c.AddLayout(context.Background(), dir, SignedBy(tc.keys))
			require.ErrorIs(t, err, ErrSideloadUnsigned)
			t.Log(err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Empty(t, refs)
			assert.Empty(t, blobFiles(t, c.Dir()), "nothing was added")
		})
	}
}

// nestedIndex is an image index levels deep around img: 1 is an index of
// img, 2 an index of that index, and so on.
func nestedIndex(t *testing.T, img v1.Image, levels int) v1.ImageIndex {
	t.Helper()
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: img})
	for range levels - 1 {
		idx = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: idx})
	}
	return idx
}

// TestSideloadNestedIndexes: indexes nest at most sideloadMaxDepth deep
// in a side-load; deeper is refused by the image's name, before anything
// is written.
func TestSideloadNestedIndexes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels int
		shared bool // another entry holds the deep index again, one level further down
		want   string
	}{
		{name: "an index of images", levels: 1},
		{name: "as deep as allowed", levels: sideloadMaxDepth},
		{name: "one level too deep", levels: sideloadMaxDepth + 1, want: "an image index 5 levels down, more than 4"},
		{name: "as deep as allowed, and again one level down in another entry", levels: sideloadMaxDepth, shared: true,
			want: "holds an image index 5 levels down, more than 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := nestedIndex(t, ociImage(t, "amd64", 1, 100), tc.levels)
			dir := filepath.Join(t.TempDir(), "disk")
			p, err := layout.Write(dir, empty.Index)
			require.NoError(t, err)
			require.NoError(t, p.AppendIndex(idx, layout.WithAnnotations(refAnnotations(extraRef))))
			if tc.shared {
				outer := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: idx})
				require.NoError(t, p.AppendIndex(outer, layout.WithAnnotations(refAnnotations("quay.io/extra/outer:1"))))
			}
			c := openCache(t)
			refs, err := c.AddLayout(context.Background(), dir)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, []string{extraRef}, refs)
				return
			}
			require.ErrorIs(t, err, ErrSideloadTooDeep)
			t.Log(err)
			assert.ErrorContains(t, err, tc.want)
			name := extraRef
			if tc.shared {
				name = "quay.io/extra/outer:1"
			}
			assert.ErrorContains(t, err, "add layout "+dir+": "+name+": ", "the refusal names the image")
			assert.Empty(t, refs)
			assert.Empty(t, blobFiles(t, c.Dir()), "nothing was added")
		})
	}
}

// TestSideloadSpace: a side-load that would leave less than the reserve
// free on the cache's file system is refused before anything is written,
// naming what it needs, what is free and the reserve.
func TestSideloadSpace(t *testing.T) {
	img := ociImage(t, "amd64", 1, 4096)
	m, err := img.Manifest()
	require.NoError(t, err)
	need := uint64(len(rawOf(t, img))) + uint64(m.Config.Size) + uint64(m.Layers[0].Size)
	for _, tc := range []struct {
		name           string
		avail, reserve uint64
		want           string
	}{
		{name: "fits beside the reserve", avail: need + 128<<10, reserve: 64 << 10},
		{name: "fits exactly", avail: need + 64<<10, reserve: 64 << 10},
		{name: "would eat into the reserve", avail: need + 32<<10, reserve: 64 << 10,
			want: "which has " + diskspace.Size(need+32<<10) + " free and keeps 64.0 KiB of it for etcd (state.reserveMiB)"},
		{name: "no reserve, too little free", avail: need - 1,
			want: "which has " + diskspace.Size(need-1) + " free: not enough free space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: img})
			c := openCache(t)
			refs, err := c.AddLayout(context.Background(), dir, WithSpace(diskspace.Fixed{Avail: tc.avail}, tc.reserve))
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, []string{extraRef}, refs)
				return
			}
			require.ErrorIs(t, err, diskspace.ErrNoSpace)
			t.Log(err)
			assert.ErrorContains(t, err, "the side-load of 1 images needs "+diskspace.Size(need)+" on "+c.Dir())
			assert.ErrorContains(t, err, tc.want)
			var s *diskspace.Shortage
			require.ErrorAs(t, err, &s)
			assert.Equal(t, need, s.Bytes)
			assert.Empty(t, refs)
			assert.Empty(t, blobFiles(t, c.Dir()), "nothing was written")
		})
	}

	// What the cache holds already is not counted again.
	c := openCache(t)
	_, err = c.AddLayout(context.Background(), sideloadLayout(t, map[string]v1.Image{extraRef: img}))
	require.NoError(t, err)
	res, err := c.Sideload(context.Background(), sideloadLayout(t, map[string]v1.Image{"quay.io/extra/again:1": img}),
		WithSpace(diskspace.Fixed{Avail: 1}, 0))
	require.NoError(t, err)
	assert.Zero(t, res.Bytes)
}
