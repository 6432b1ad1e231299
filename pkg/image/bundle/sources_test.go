package bundle

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/require"
)

func layoutBundle(t *testing.T, dir, ref, pin string) *Bundle {
	t.Helper()
	src := "      layout: {path: ./oci"
	if ref != "" {
		src += ", ref: " + ref
	}
	src += "}\n"
	if pin != "" {
		src += "      digest: " + pin + "\n"
	}
	return writeBundle(t, dir, "images:\n  - name: quay.io/x/app:1\n    source:\n"+src)
}

func TestLayoutSource(t *testing.T) {
	app := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	other := testImage(t, "linux/amd64", testLayer(t, "other", "other"))
	tests := []struct {
		name    string
		entries map[string]any
		ref     string
		want    v1.Image
		wantErr []string
	}{
		{name: "by full name", entries: map[string]any{"quay.io/x/app:1": app, "quay.io/x/other:1": other}, ref: "quay.io/x/app:1", want: app},
		{name: "by tag only", entries: map[string]any{"1": app, "2": other}, ref: "quay.io/x/app:1", want: app},
		{name: "sole image", entries: map[string]any{"": app}, want: app},
		{name: "unknown ref", entries: map[string]any{"quay.io/x/other:1": other}, ref: "quay.io/x/app:1",
			wantErr: []string{"quay.io/x/app:1: layout ./oci (quay.io/x/app:1): no image named quay.io/x/app:1 (it has quay.io/x/other:1)"}},
		{name: "several without ref", entries: map[string]any{"a": app, "b": other},
			wantErr: []string{"holds 2 images", "set ref to pick one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTestLayout(t, filepath.Join(dir, "oci"), tt.entries)
			b := layoutBundle(t, dir, tt.ref, "")
			rs, err := Resolve(context.Background(), b, WithCacheDir(t.TempDir()))
			if tt.wantErr != nil {
				wantErr(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := digestOf(t, tt.want); rs[0].Digest != want || digestOf(t, rs[0].Image) != want {
				t.Errorf("resolved %s, want %s", rs[0].Digest, want)
			}
			if err := validate.Image(rs[0].Image); err != nil {
				t.Errorf("validate: %v", err)
			}
		})
	}
}

func TestLayoutSourceMalformed(t *testing.T) {
	img := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	blobPath := func(dir string, h v1.Hash) string { return filepath.Join(dir, "oci", "blobs", h.Algorithm, h.Hex) }
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		wantErr []string
	}{
		{name: "no layout", damage: func(t *testing.T, dir string) { require.NoError(t, os.RemoveAll(filepath.Join(dir, "oci"))) },
			wantErr: []string{"not an OCI image layout", "has no index.json"}},
		{name: "no index.json", damage: func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "oci", "index.json"))) },
			wantErr: []string{"not an OCI image layout", "has no index.json"}},
		{name: "missing manifest", damage: func(t *testing.T, dir string) { require.NoError(t, os.Remove(blobPath(dir, digestOf(t, img)))) },
			wantErr: []string{"missing blob"}},
		{name: "missing layer", damage: func(t *testing.T, dir string) {
			layers, err := img.Layers()
			require.NoError(t, err)
			require.NoError(t, os.Remove(blobPath(dir, digestOf(t, layers[0]))))
		}, wantErr: []string{"quay.io/x/app:1: layout ./oci: blob sha256:", "is missing"}},
		{name: "corrupt layer", damage: func(t *testing.T, dir string) {
			layers, err := img.Layers()
			require.NoError(t, err)
			p := blobPath(dir, digestOf(t, layers[0]))
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{'x'}, len(data)), 0o644))
		}, wantErr: []string{"content does not match its descriptor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTestLayout(t, filepath.Join(dir, "oci"), map[string]any{"": img})
			tt.damage(t, dir)
			_, err := Resolve(context.Background(), layoutBundle(t, dir, "", ""), WithCacheDir(t.TempDir()))
			wantErr(t, err, tt.wantErr...)
		})
	}
}

func TestDigestPin(t *testing.T) {
	img := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	right := digestOf(t, img).String()
	wrong := "sha256:" + fmt.Sprintf("%064x", 1)
	for _, tt := range []struct {
		pin     string
		wantErr string
	}{
		{pin: right},
		{pin: wrong, wantErr: "quay.io/x/app:1: resolved to " + right + " but the bundle pins " + wrong},
	} {
		dir := t.TempDir()
		writeTestLayout(t, filepath.Join(dir, "oci"), map[string]any{"": img})
		_, err := Resolve(context.Background(), layoutBundle(t, dir, "", tt.pin), WithCacheDir(t.TempDir()))
		if tt.wantErr == "" && err != nil {
			t.Errorf("pin %s: %v", tt.pin, err)
		}
		if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
			t.Errorf("pin %s: error %v, want %q", tt.pin, err, tt.wantErr)
		}
	}
}

func TestPlatformSelection(t *testing.T) {
	two := testIndex(t, "linux/amd64", "linux/arm64")
	three := testIndex(t, "linux/amd64", "linux/arm64", "linux/s390x")
	child := func(idx v1.ImageIndex, i int) v1.Hash {
		im, _ := idx.IndexManifest()
		return im.Manifests[i].Digest
	}
	tests := []struct {
		name      string
		index     v1.ImageIndex
		platforms string
		want      v1.Hash // zero: a new index
		wantN     int     // manifests of a new index
		wantErr   string
	}{
		{name: "one of two", index: two, platforms: "[linux/arm64]", want: child(two, 1)},
		{name: "all of them", index: two, platforms: "[linux/amd64, linux/arm64]", want: digestOf(t, two)},
		{name: "two of three", index: three, platforms: "[linux/amd64, linux/s390x]", wantN: 2},
		{name: "variant", index: two, platforms: "[linux/arm64/v8]", wantErr: "has no linux/arm64/v8 image (it has linux/amd64, linux/arm64)"},
		{name: "missing", index: two, platforms: "[linux/riscv64]", wantErr: "has no linux/riscv64 image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTestLayout(t, filepath.Join(dir, "oci"), map[string]any{"": tt.index})
			b := writeBundle(t, dir, "platforms: "+tt.platforms+"\nimages:\n  - name: quay.io/x/app:1\n    source:\n      layout: {path: ./oci}\n")
			rs, err := Resolve(context.Background(), b, WithCacheDir(t.TempDir()))
			if tt.wantErr != "" {
				wantErr(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if tt.want != (v1.Hash{}) && r.Digest != tt.want {
				t.Errorf("resolved %s, want %s", r.Digest, tt.want)
			}
			if tt.wantN > 0 {
				if err := validate.Index(r.Index); err != nil {
					t.Fatal(err)
				}
				im, _ := r.Index.IndexManifest()
				if len(im.Manifests) != tt.wantN {
					t.Errorf("new index has %d manifests, want %d", len(im.Manifests), tt.wantN)
				}
			}
		})
	}
}

func TestSinglePlatformMismatch(t *testing.T) {
	dir := t.TempDir()
	img := testImage(t, "linux/arm64", testLayer(t, "app", "app"))
	writeTestLayout(t, filepath.Join(dir, "oci"), map[string]any{"": img})
	_, err := Resolve(context.Background(), layoutBundle(t, dir, "", ""), WithCacheDir(t.TempDir()))
	wantErr(t, err, "is a linux/arm64 image but the bundle wants linux/amd64")
}

func TestTarballSource(t *testing.T) {
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("ghcr.io/x/z:1")
	tests := []struct {
		name    string
		make    func(t *testing.T, dir string)
		ref     string
		wantErr []string
	}{
		{name: "docker archive", make: func(t *testing.T, dir string) { writeDockerArchive(t, dir, tag, img, false) }},
		{name: "gzipped docker archive", make: func(t *testing.T, dir string) { writeDockerArchive(t, dir, tag, img, true) }},
		{name: "docker archive by tag", ref: "ghcr.io/x/z:1", make: func(t *testing.T, dir string) { writeDockerArchive(t, dir, tag, img, false) }},
		{name: "OCI archive", ref: "ghcr.io/x/z:1", make: func(t *testing.T, dir string) {
			oci := filepath.Join(dir, "oci")
			writeTestLayout(t, oci, map[string]any{"ghcr.io/x/z:1": img})
			tarDir(t, oci, filepath.Join(dir, "z.tar"))
		}},
		{name: "unknown tag", ref: "ghcr.io/x/z:2", make: func(t *testing.T, dir string) { writeDockerArchive(t, dir, tag, img, false) },
			wantErr: []string{"tarball ./z.tar: read docker archive:", "not found"}},
		{name: "not found", make: func(*testing.T, string) {},
			wantErr: []string{"ghcr.io/x/z:1: tarball ./z.tar: not found"}},
		{name: "not an image archive", make: func(t *testing.T, dir string) { tarDir(t, t.TempDir(), filepath.Join(dir, "z.tar")) },
			wantErr: []string{"neither a docker archive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.make(t, dir)
			src := "      tarball: {path: ./z.tar}\n"
			if tt.ref != "" {
				src = "      tarball: {path: ./z.tar, ref: " + tt.ref + "}\n"
			}
			b := writeBundle(t, dir, "images:\n  - name: ghcr.io/x/z:1\n    source:\n"+src)
			rs, err := Resolve(context.Background(), b, WithCacheDir(t.TempDir()))
			if tt.wantErr != nil {
				wantErr(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Image(rs[0].Image); err != nil {
				t.Errorf("validate: %v", err)
			}
			wantLayers, _ := img.Layers()
			if got, _ := rs[0].Image.Layers(); len(got) != len(wantLayers) {
				t.Errorf("%d layers, want %d", len(got), len(wantLayers))
			}
		})
	}
}

func writeDockerArchive(t *testing.T, dir string, tag name.Tag, img v1.Image, gz bool) {
	t.Helper()
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if gz {
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		_, err := zw.Write(data)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		data = zbuf.Bytes()
	}
	if err := os.WriteFile(filepath.Join(dir, "z.tar"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
