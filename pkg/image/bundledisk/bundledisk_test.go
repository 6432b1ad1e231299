package bundledisk

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

// TestWriteIsAddable writes a signed bundle disk for the side-load test
// bundle, checks the ext4 label, extracts the layout with debugfs and adds
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

	out, err := exec.Command("dumpe2fs", "-h", img).CombinedOutput()
	require.NoError(t, err, "dumpe2fs (run make deps): %s", out)
	assert.Contains(t, string(out), "Filesystem volume name:   "+Label)
	extracted := filepath.Join(dir, "extracted")
	require.NoError(t, os.Mkdir(extracted, 0o755))
	out, err = exec.Command("debugfs", "-R", "rdump / "+extracted, img).CombinedOutput()
	require.NoError(t, err, "debugfs rdump: %s", out)

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

// extract writes a bundle disk (the images built into cache) and returns
// the directory its layout was extracted into (debugfs).
func extract(t *testing.T, cache string, s Signing) (string, error) {
	t.Helper()
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	if _, err := Write(context.Background(), "../../../bundles/sideload-test.yaml", img, s, bundle.WithCacheDir(cache)); err != nil {
		return "", err
	}
	extracted := filepath.Join(dir, "extracted")
	require.NoError(t, os.Mkdir(extracted, 0o755))
	out, err := exec.Command("debugfs", "-R", "rdump / "+extracted, img).CombinedOutput()
	require.NoError(t, err, "debugfs rdump: %s", out)
	return extracted, nil
}

// TestWriteReplaceTags: --replace-tags marks the named images' entries in
// the signed index.json, and a node that trusts the key for bundles moves
// its tag to them, reporting the digest it had; the flag without a key,
// or naming an image the bundle lacks, is refused.
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
			{"an image the bundle lacks", Signing{Key: key, ReplaceTags: []string{ref, "quay.io/terrarium/other:2"}},
				"--replace-tags quay.io/terrarium/other:2: not an image of the bundle; its images are " + ref},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := extract(t, cache, tc.s)
				assert.EqualError(t, err, tc.want)
			})
		}
	})

	extracted, err := extract(t, cache, Signing{Key: key, ReplaceTags: []string{ref}})
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(extracted, "index.json"))
	require.NoError(t, err)
	var idx v1.IndexManifest
	require.NoError(t, json.Unmarshal(raw, &idx))
	require.Len(t, idx.Manifests, 1)
	assert.Equal(t, "true", idx.Manifests[0].Annotations[layout.BundleReplacesAnnotation])

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
	assert.Equal(t, []registry.ReplacedTag{{Ref: ref, Old: oldDesc.Digest, New: idx.Manifests[0].Digest}}, res.Replaced)
}

func TestWriteBadBundleLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	_, err := Write(context.Background(), "../../../bundles/does-not-exist.yaml", img, Signing{})
	require.Error(t, err)
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	assert.Empty(t, m, "left behind")
}
