package bundledisk

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ggcrlayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// TestWriteIsAddable writes a signed bundle disk for the side-load test
// bundle, checks that it is FAT labelled TERRA-BUNDL (what a node mounts
// from a disk a person attaches), extracts the layout with mcopy and adds
// it to a registry cache the way a node does: one that takes only bundles
// signed by the key, and, with the signature removed, one that refuses
// it.
func TestWriteIsAddable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	m, err := Write(ctx, "../../../bundles/sideload-test.yaml", img, Signing{Key: key}, bundle.WithCacheDir(filepath.Join(dir, "cache")))
	require.NoError(t, err)
	require.Len(t, m.Images, 1)
	assert.Equal(t, "quay.io/terrarium/sideloaded:1.0", m.Images[0].Name)

	f, err := os.Open(img)
	require.NoError(t, err)
	fs, err := media.Probe(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	assert.Equal(t, media.VFAT, fs)
	assert.True(t, media.Allowed(fs, media.Read), "a node refuses %s", fs)
	out, err := exec.Command("mlabel", "-s", "-i", img, "::").CombinedOutput()
	require.NoError(t, err, "mlabel (run make deps): %s", out)
	assert.Equal(t, "Volume label is "+Label, strings.TrimSpace(string(out)))
	extracted := extractFAT(t, img, dir)

	add := func(opts ...registry.AddOption) ([]string, error) {
		cache, err := registry.OpenCache(t.TempDir())
		require.NoError(t, err)
		return cache.AddLayout(ctx, extracted, opts...)
	}
	refs, err := add(registry.SignedBy([]signature.PublicKey{pub}))
	require.NoError(t, err, "AddLayout of the signed disk's content")
	assert.Equal(t, []string{"quay.io/terrarium/sideloaded:1.0"}, refs)

	require.NoError(t, os.Remove(filepath.Join(extracted, layout.BundleIndexSignature)))
	_, err = add(registry.SignedBy([]signature.PublicKey{pub}))
	assert.ErrorIs(t, err, registry.ErrSideloadUnsigned)
	refs, err = add()
	require.NoError(t, err, "a node that trusts no key takes it unsigned")
	assert.Len(t, refs, 1)
}

// extractFAT copies the FAT disk img's content into a directory under dir
// (mcopy) and returns it.
func extractFAT(t *testing.T, img, dir string) string {
	t.Helper()
	extracted := filepath.Join(dir, "extracted")
	require.NoError(t, os.Mkdir(extracted, 0o755))
	out, err := exec.Command("mcopy", "-s", "-n", "-i", img, "::*", extracted).CombinedOutput()
	require.NoError(t, err, "mcopy (run make deps): %s", out)
	return extracted
}

// extract writes a bundle disk (the images built into cache) and returns
// the directory its layout was extracted into (mcopy).
func extract(t *testing.T, cache string, s Signing) (string, error) {
	t.Helper()
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	if _, err := Write(context.Background(), "../../../bundles/sideload-test.yaml", img, s, bundle.WithCacheDir(cache)); err != nil {
		return "", err
	}
	return extractFAT(t, img, dir), nil
}

// TestWriteReplaceTags: --replace-tags marks the named images' entries in
// the signed index.json with the bundle's generation, and a node that
// trusts the key for bundles moves its tag to them, reporting the digest
// it had and the generation; the flag without a key or without a
// generation, a generation without it, or naming an image the bundle
// lacks, is refused before anything is built.
func TestWriteReplaceTags(t *testing.T) {
	const ref = "quay.io/terrarium/sideloaded:1.0"
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	cache := t.TempDir() // the image is built once

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			s    Signing
			want string
		}{
			{"without a key", Signing{ReplaceTags: []string{ref}},
				"replacing tags (" + ref + ") needs a signed disk: a node honours it only in a bundle signed by a key it trusts for bundles; sign it (--sign KEY)"},
			{"without a generation", Signing{Key: key, ReplaceTags: []string{ref}},
				"replacing tags (" + ref + ") needs the bundle's generation (--generation N): a node records the highest generation that moved each tag " +
					"and refuses a bundle at or below it, so an older bundle cannot be played again to move a tag back; " +
					"give a number above that of every bundle signed before for these tags (1 for the first)"},
			{"a generation without tags to replace", Signing{Key: key, Generation: 3},
				"--generation 3 is the generation of the tags a bundle replaces, and it replaces none: name them with --replace-tags"},
			{"an image the bundle lacks", Signing{Key: key, ReplaceTags: []string{ref, "quay.io/terrarium/other:2"}, Generation: 1},
				"--replace-tags quay.io/terrarium/other:2: not an image of the bundle; its images are " + ref},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := extract(t, cache, tc.s)
				assert.EqualError(t, err, tc.want)
			})
		}
	})

	extracted, err := extract(t, cache, Signing{Key: key, ReplaceTags: []string{ref}, Generation: 2})
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(extracted, "index.json"))
	require.NoError(t, err)
	var idx v1.IndexManifest
	require.NoError(t, json.Unmarshal(raw, &idx))
	require.Len(t, idx.Manifests, 1)
	assert.Equal(t, "true", idx.Manifests[0].Annotations[layout.BundleReplacesAnnotation])
	assert.Equal(t, "2", idx.Manifests[0].Annotations[layout.BundleGenerationAnnotation])

	// A node that has the tag with another image.
	ctx := context.Background()
	node, err := registry.OpenCache(t.TempDir())
	require.NoError(t, err)
	old, err := random.Image(100, 1)
	require.NoError(t, err)
	oldDesc, err := node.AddImage(ctx, ref, old)
	require.NoError(t, err)
	res, err := node.Sideload(ctx, extracted, registry.SignedBy([]signature.PublicKey{pub}))
	require.NoError(t, err)
	assert.Equal(t, []string{ref}, res.Added)
	assert.Equal(t, []registry.ReplacedTag{{Ref: ref, Old: oldDesc.Digest, New: idx.Manifests[0].Digest, Generation: 2}}, res.Replaced)

	// The tag moved on with a later bundle (made here as the node takes
	// it); this disk played again is refused.
	later, err := random.Image(100, 1)
	require.NoError(t, err)
	laterDir := filepath.Join(t.TempDir(), "later")
	p, err := ggcrlayout.Write(laterDir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(later, ggcrlayout.WithAnnotations(map[string]string{
		bundle.RefNameAnnotation: ref, layout.BundleReplacesAnnotation: "true", layout.BundleGenerationAnnotation: "3",
	})))
	index, err := os.ReadFile(filepath.Join(laterDir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(laterDir, layout.BundleIndexSignature), signature.SignFor(signature.PurposeBundle, key, index), 0o644))
	_, err = node.Sideload(ctx, laterDir, registry.SignedBy([]signature.PublicKey{pub}))
	require.NoError(t, err)
	_, err = node.Sideload(ctx, extracted, registry.SignedBy([]signature.PublicKey{pub}))
	require.ErrorIs(t, err, registry.ErrSideloadReplayed)
	assert.ErrorContains(t, err, "replacing "+ref+" is refused: its generation 2 is not above 3, which this node already applied; sign a new bundle with --generation 4 or higher")
}

func TestWriteBadBundleLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	_, err := Write(context.Background(), "../../../bundles/does-not-exist.yaml", img, Signing{})
	require.Error(t, err)
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	assert.Empty(t, m, "left behind")
}
