package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// tarLayer is a gzip layer of the entries: name → content ("" for a
// directory, a name ending in "/").
func tarLayer(t *testing.T, entries ...[2]string) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		name, content := e[0], e[1]
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if name[len(name)-1] == '/' {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		require.NoError(t, tw.WriteHeader(hdr))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	data := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	require.NoError(t, err)
	return l
}

// bundle writes an OCI layout of one image made of the layers.
func bundle(t *testing.T, layers ...v1.Layer) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, layers...)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img))
	return dir
}

func TestUnpackInOverlayForm(t *testing.T) {
	base := tarLayer(t, [2]string{"etc/", ""}, [2]string{"etc/os-release", "ID=test\n"}, [2]string{"etc/old", "gone next layer"},
		[2]string{"var/cache/", ""}, [2]string{"var/cache/a", "a"})
	top := tarLayer(t, [2]string{"etc/", ""}, [2]string{"etc/.wh.old", ""}, [2]string{"var/cache/", ""},
		[2]string{"var/cache/.wh..wh..opq", ""}, [2]string{"var/cache/b", "b"}, [2]string{"bin/", ""}, [2]string{"bin/app", "#!app"})
	dir := bundle(t, base, top)
	dst := t.TempDir()
	var lines []string
	res, err := Unpack(context.Background(), dir, dst, func(l string) { lines = append(lines, l) })
	require.NoError(t, err)
	assert.Equal(t, 1, res.Images)
	assert.Equal(t, 2, res.Layers)
	assert.Equal(t, 2, res.Unpacked)
	assert.Len(t, lines, 2)

	baseID, err := base.DiffID()
	require.NoError(t, err)
	topID, err := top.DiffID()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(Dir(dst, baseID), "etc/os-release"))
	require.NoError(t, err)
	assert.Equal(t, "ID=test\n", string(b))

	// etc/old deleted: a 0/0 character device, as overlayfs reads it.
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(Dir(dst, topID), "etc/old"), &st))
	assert.Equal(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT)
	assert.Zero(t, st.Rdev)
	// var/cache replaced whole: opaque.
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(Dir(dst, topID), "var/cache"), "trusted.overlay.opaque", buf)
	require.NoError(t, err)
	assert.Equal(t, "y", string(buf[:n]))
	assert.NoFileExists(t, filepath.Join(Dir(dst, topID), "var/cache/.wh..wh..opq"))
	assert.FileExists(t, filepath.Join(Dir(dst, topID), "var/cache/b"))

	// Again: nothing to do.
	res, err = Unpack(context.Background(), dir, dst, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Unpacked)
	entries, err := os.ReadDir(filepath.Join(dst, "sha256"))
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no leftovers")
}

func TestUnpackRefusesALayerThatIsNotItsDiffID(t *testing.T) {
	good := tarLayer(t, [2]string{"a", "a"})
	dir := bundle(t, good)
	// The layout's config names another diffID for the layer.
	id, err := good.DiffID()
	require.NoError(t, err)
	other := v1.Hash{Algorithm: "sha256", Hex: "00" + id.Hex[2:]}
	cfgs, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	require.NoError(t, err)
	replaced := false
	for _, c := range cfgs {
		b, err := os.ReadFile(c)
		require.NoError(t, err)
		if bytes.Contains(b, []byte(`"diff_ids"`)) {
			// A config naming a wrong diffID (its own digest then
			// wrong too, which readers need not check).
			require.NoError(t, os.WriteFile(c, bytes.ReplaceAll(b, []byte(id.Hex), []byte(other.Hex)), 0o644))
			replaced = true
		}
	}
	require.True(t, replaced)
	dst := t.TempDir()
	_, err = Unpack(context.Background(), dir, dst, nil)
	require.ErrorContains(t, err, "unpack layer "+other.String()+": its content is "+id.String())
	entries, _ := os.ReadDir(filepath.Join(dst, "sha256"))
	for _, e := range entries {
		assert.NotEqual(t, id.Hex, e.Name(), "nothing named by a diffID it was not checked against")
	}
}
