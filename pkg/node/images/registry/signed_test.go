package registry

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clayout "github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// With SignedBy, a side-loaded layout is taken only when its index.json
// carries a bundle signature by a trusted key; anything else is refused
// with ErrSideloadUnsigned and adds nothing.
func TestSideloadSignedOnly(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	otherKey, _, err := signature.GenerateKey()
	require.NoError(t, err)
	sign := func(t *testing.T, dir string, p signature.Purpose, k []byte) {
		t.Helper()
		index, err := os.ReadFile(filepath.Join(dir, "index.json"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, clayout.BundleIndexSignature), signature.SignFor(p, k, index), 0o644))
	}
	for _, tc := range []struct {
		name string
		disk func(t *testing.T, dir string)
		want []error // nil: taken
	}{
		{"signed by a trusted key", func(t *testing.T, dir string) { sign(t, dir, signature.PurposeBundle, key) }, nil},
		{"unsigned", func(t *testing.T, dir string) {}, []error{ErrSideloadUnsigned}},
		{"signed by another key", func(t *testing.T, dir string) { sign(t, dir, signature.PurposeBundle, otherKey) },
			[]error{ErrSideloadUnsigned, signature.ErrUnknownKey}},
		{"a config signature", func(t *testing.T, dir string) { sign(t, dir, signature.PurposeConfig, key) },
			[]error{ErrSideloadUnsigned, signature.ErrBadSignature}},
		{"index.json changed after signing", func(t *testing.T, dir string) {
			sign(t, dir, signature.PurposeBundle, key)
			index := filepath.Join(dir, "index.json")
			b, err := os.ReadFile(index)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(index, append(b, ' '), 0o644))
		}, []error{ErrSideloadUnsigned, signature.ErrBadSignature}},
		{"the signature a symlink out of the medium", func(t *testing.T, dir string) {
			outside := filepath.Join(t.TempDir(), "sig")
			sign(t, dir, signature.PurposeBundle, key)
			require.NoError(t, os.Rename(filepath.Join(dir, clayout.BundleIndexSignature), outside))
			require.NoError(t, os.Symlink(outside, filepath.Join(dir, clayout.BundleIndexSignature)))
		}, []error{ErrSideloadOutside}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
			tc.disk(t, dir)
			c := openCache(t)
			refs, err := c.AddLayout(context.Background(), dir, SignedBy([]signature.PublicKey{pub}))
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, []string{extraRef}, refs)
				return
			}
			for _, w := range tc.want {
				assert.ErrorIs(t, err, w)
			}
			assert.Empty(t, refs)
			_, err = c.Resolve(context.Background(), "quay.io/extra/app", "1")
			assert.ErrorIs(t, err, ErrNotFound, "nothing was added")
		})
	}

	// Without the policy an unsigned layout is taken as before.
	dir := sideloadLayout(t, map[string]v1.Image{extraRef: ociImage(t, "amd64", 1, 100)})
	refs, err := openCache(t).AddLayout(context.Background(), dir)
	require.NoError(t, err)
	assert.Equal(t, []string{extraRef}, refs)
}
