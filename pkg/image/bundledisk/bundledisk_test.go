package bundledisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/node/registry"
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
	m, err := Write(ctx, "../../../bundles/sideload-test.yaml", img, key, bundle.WithCacheDir(filepath.Join(dir, "cache")))
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
	require.NoError(t, err, "a node without the policy takes it unsigned")
	assert.Len(t, refs, 1)
}

func TestWriteBadBundleLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	_, err := Write(context.Background(), "../../../bundles/does-not-exist.yaml", img, nil)
	require.Error(t, err)
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	assert.Empty(t, m, "left behind")
}
