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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clayout "github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// generationNode is a cache that trusts one key for bundles, with a way to
// side-load signed replacing bundles into it.
type generationNode struct {
	c    *Cache
	key  ed25519.PrivateKey
	opts []AddOption
}

func newGenerationNode(t *testing.T) *generationNode {
	t.Helper()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	return &generationNode{c: openCache(t), key: key, opts: []AddOption{SignedBy([]signature.PublicKey{pub})}}
}

// stick is a signed bundle that replaces extraRef with img at generation
// ("-": marked replacing without one).
func (n *generationNode) stick(t *testing.T, img v1.Image, generation string) string {
	t.Helper()
	dir := generationLayout(t, extraRef, img, generation)
	signLayout(t, dir, n.key)
	return dir
}

func (n *generationNode) tag(t *testing.T) v1.Hash {
	t.Helper()
	d, err := n.c.Resolve(context.Background(), "quay.io/extra/app", "1")
	require.NoError(t, err)
	return d.Digest
}

// state is what a refusal must leave alone: index.json, the generations
// and the blob files.
func (n *generationNode) state(t *testing.T) []string {
	t.Helper()
	index, err := os.ReadFile(filepath.Join(n.c.Dir(), "index.json"))
	require.NoError(t, err)
	gens, err := os.ReadFile(n.c.generationsPath())
	if os.IsNotExist(err) {
		err = nil
	}
	require.NoError(t, err)
	return append([]string{string(index), string(gens)}, blobFiles(t, n.c.Dir())...)
}

// TestSideloadReplayRefused: stick A moves the tag to X with generation 1,
// stick B to Y with generation 2; A again is refused by name, with the
// generations and the fix, and changes nothing on disk; B again is taken
// (it changes nothing); a higher generation moves the tag; and the record
// survives a reopened cache.
func TestSideloadReplayRefused(t *testing.T) {
	ctx := context.Background()
	n := newGenerationNode(t)
	_, err := n.c.AddLayout(ctx, sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)}))
	require.NoError(t, err, "the tag the node has, unsigned")

	x, y, z := ociImage(t, "amd64", 1, 100), ociImage(t, "amd64", 1, 100), ociImage(t, "amd64", 1, 100)
	a, b := n.stick(t, x, "1"), n.stick(t, y, "2")
	res, err := n.c.Sideload(ctx, a, n.opts...)
	require.NoError(t, err, "stick A")
	assert.Equal(t, uint64(1), res.Replaced[0].Generation)
	res, err = n.c.Sideload(ctx, b, n.opts...)
	require.NoError(t, err, "stick B")
	assert.Equal(t, []ReplacedTag{{Ref: extraRef, Old: digestOf(t, x), New: digestOf(t, y), Generation: 2}}, res.Replaced)

	before := n.state(t)
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"stick A again", a, "add layout " + a + ": replacing quay.io/extra/app:1 is refused: its generation 1 is not above 2, " +
			"which this node already applied; sign a new bundle with --generation 3 or higher"},
		{"another image at the same generation", n.stick(t, z, "2"), "replacing quay.io/extra/app:1 is refused: its generation 2 is not above 2, " +
			"which this node already applied; sign a new bundle with --generation 3 or higher"},
		{"no generation", n.stick(t, z, "-"), "replacing quay.io/extra/app:1 is refused: the bundle gives it no generation (dev.terrarium.generation), " +
			"so this node cannot tell it from an older bundle played again; sign a new bundle with --generation 3 or higher"},
		{"a generation that is no number above 0", n.stick(t, z, "0"), `replacing quay.io/extra/app:1 is refused: its generation "0" is not a whole number above 0`},
		{"a generation with a sign", n.stick(t, z, "+3"), `its generation "+3" is not a whole number above 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := n.c.Sideload(ctx, tc.dir, n.opts...)
			require.ErrorIs(t, err, ErrSideloadReplayed)
			t.Log(err)
			assert.ErrorContains(t, err, tc.want)
			assert.Empty(t, res.Added)
			assert.Equal(t, digestOf(t, y), n.tag(t), "the tag did not move")
			assert.Equal(t, before, n.state(t), "nothing on disk changed")
		})
	}

	res, err = n.c.Sideload(ctx, b, n.opts...)
	require.NoError(t, err, "stick B again changes nothing")
	assert.Empty(t, res.Replaced)

	res, err = n.c.Sideload(ctx, n.stick(t, z, "3"), n.opts...)
	require.NoError(t, err, "a higher generation")
	assert.Equal(t, []ReplacedTag{{Ref: extraRef, Old: digestOf(t, y), New: digestOf(t, z), Generation: 3}}, res.Replaced)

	reopened, err := OpenCache(n.c.Dir())
	require.NoError(t, err)
	_, err = reopened.Sideload(ctx, b, n.opts...)
	require.ErrorIs(t, err, ErrSideloadReplayed, "the record survives a restart")
	assert.ErrorContains(t, err, "its generation 2 is not above 3, which this node already applied; sign a new bundle with --generation 4 or higher")
}

// A stick with the higher generation inserted first sets a tag the node
// did not have; the older stick after it is refused all the same.
func TestSideloadReplayOfAnOlderStickFirstSeenLater(t *testing.T) {
	ctx := context.Background()
	n := newGenerationNode(t)
	x, y := ociImage(t, "amd64", 1, 100), ociImage(t, "amd64", 1, 100)
	_, err := n.c.Sideload(ctx, n.stick(t, y, "2"), n.opts...)
	require.NoError(t, err)
	_, err = n.c.Sideload(ctx, n.stick(t, x, "1"), n.opts...)
	require.ErrorIs(t, err, ErrSideloadReplayed)
	assert.ErrorContains(t, err, "its generation 1 is not above 2")
	assert.Equal(t, digestOf(t, y), n.tag(t))
}

// A power cut after the generations were recorded and before the tag
// moved: the same stick completes the move.
func TestSideloadSameStickAfterACut(t *testing.T) {
	ctx := context.Background()
	n := newGenerationNode(t)
	old, x := ociImage(t, "amd64", 1, 100), ociImage(t, "amd64", 1, 100)
	_, err := n.c.AddLayout(ctx, sideloadLayout(t, map[string]v1.Image{extraRef: old}))
	require.NoError(t, err)
	_, err = n.c.recordGenerations(tagGenerations{Version: 1, Tags: map[string]tagGeneration{}},
		map[string]tagGeneration{extraRef: {Generation: 5, Digest: digestOf(t, x)}})
	require.NoError(t, err)

	res, err := n.c.Sideload(ctx, n.stick(t, x, "5"), n.opts...)
	require.NoError(t, err)
	assert.Equal(t, []ReplacedTag{{Ref: extraRef, Old: digestOf(t, old), New: digestOf(t, x), Generation: 5}}, res.Replaced)
	assert.Equal(t, digestOf(t, x), n.tag(t))
}

// A bundle replacing two tags, one of them replayed, is refused whole:
// neither tag moves.
func TestSideloadReplayRefusesTheWholeBundle(t *testing.T) {
	ctx := context.Background()
	n := newGenerationNode(t)
	const other = "quay.io/extra/other:1"
	imgs := map[string]v1.Image{}
	for _, ref := range []string{extraRef, other} {
		imgs[ref] = ociImage(t, "amd64", 1, 100)
	}
	_, err := n.c.AddLayout(ctx, sideloadLayout(t, imgs))
	require.NoError(t, err)
	_, err = n.c.Sideload(ctx, n.stick(t, ociImage(t, "amd64", 1, 100), "4"), n.opts...)
	require.NoError(t, err)
	before := n.state(t)

	dir := filepath.Join(t.TempDir(), "disk")
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	for _, ref := range []string{extraRef, other} {
		ann := refAnnotations(ref)
		ann[clayout.BundleReplacesAnnotation] = "true"
		ann[clayout.BundleGenerationAnnotation] = "3"
		require.NoError(t, p.AppendImage(ociImage(t, "amd64", 1, 100), layout.WithAnnotations(ann)))
	}
	signLayout(t, dir, n.key)
	_, err = n.c.Sideload(ctx, dir, n.opts...)
	require.ErrorIs(t, err, ErrSideloadReplayed)
	assert.EqualError(t, err, "add layout "+dir+": replacing quay.io/extra/app:1 is refused: its generation 3 is not above 4, "+
		"which this node already applied; sign a new bundle with --generation 5 or higher")
	assert.Equal(t, before, n.state(t), "neither tag moved, nothing was written")
}

// A record that does not read back refuses a replacing bundle, by the
// file's name; a bundle that replaces nothing is still taken.
func TestSideloadGenerationsUnreadable(t *testing.T) {
	ctx := context.Background()
	n := newGenerationNode(t)
	require.NoError(t, os.WriteFile(n.c.generationsPath(), []byte("{not json"), 0o644))
	_, err := n.c.Sideload(ctx, n.stick(t, ociImage(t, "amd64", 1, 100), "1"), n.opts...)
	require.Error(t, err)
	assert.ErrorContains(t, err, n.c.generationsPath()+" does not read back")
	plain := sideloadLayout(t, map[string]v1.Image{"quay.io/extra/plain:1": ociImage(t, "amd64", 1, 100)})
	signLayout(t, plain, n.key)
	_, err = n.c.Sideload(ctx, plain, n.opts...)
	require.NoError(t, err)
}
