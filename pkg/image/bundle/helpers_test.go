package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testEpoch is the epoch of built test images.
var testEpoch = time.Unix(1767225600, 0).UTC()

// golden compares got with testdata/<name>, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// writeBundle writes a bundle document (apiVersion, kind, name and version
// are prepended) into dir and parses it.
func writeBundle(t *testing.T, dir, body string) *Bundle {
	t.Helper()
	doc := "apiVersion: terrarium.dev/v1alpha1\nkind: Bundle\nname: test\nversion: 0.1.0\n" + body
	path := filepath.Join(dir, "bundle.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Parse(path)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return b
}

// resolveOne resolves a bundle of one image and returns it.
func resolveOne(t *testing.T, b *Bundle, opts ...Option) Resolved {
	t.Helper()
	rs, err := Resolve(context.Background(), b, opts...)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if len(rs) != 1 {
		t.Fatalf("Resolve returned %d images, want 1", len(rs))
	}
	return rs[0]
}

// wantErr fails unless err is non-nil and contains every fragment.
func wantErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not contain %q", err, f)
		}
	}
}

// testLayer makes a deterministic gzipped layer holding one file.
func testLayer(t *testing.T, name, content string) v1.Layer {
	t.Helper()
	data, err := gzipTar([]layerFile{{name: name, mode: 0o644, data: []byte(content)}}, testEpoch)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage makes a deterministic OCI image of the layers for platform
// ("linux/amd64").
func testImage(t *testing.T, platform string, layers ...v1.Layer) v1.Image {
	t.Helper()
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant,
		RootFS: v1.RootFS{Type: "layers"}, Config: v1.Config{Entrypoint: []string{"/app"}}})
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.AppendLayers(img, layers...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: testEpoch})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testIndex makes an OCI index of one small image per platform.
func testIndex(t *testing.T, platforms ...string) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, ps := range platforms {
		p, _ := v1.ParsePlatform(ps)
		img := testImage(t, ps, testLayer(t, "app", "app for "+ps))
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	return idx
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// writeTestLayout writes an OCI layout at dir with the images (v1.Image or
// v1.ImageIndex), each annotated with the ref.name given as its key ("" for
// none).
func writeTestLayout(t *testing.T, dir string, entries map[string]any) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for ref, e := range entries {
		var opts []layout.Option
		if ref != "" {
			opts = append(opts, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref}))
		}
		switch e := e.(type) {
		case v1.Image:
			err = p.AppendImage(e, opts...)
		case v1.ImageIndex:
			err = p.AppendIndex(e, opts...)
		default:
			err = fmt.Errorf("unexpected %T", e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// tarDir writes the files under dir into a tar archive at dst.
func tarDir(t *testing.T, dir, dst string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// layerFiles lists the entries of an image's single layer.
func layerFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v (%d)", err, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
	}
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
