package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// testResolved makes deterministic images: two sharing a base layer, the
// first again under a second name, and a two-platform index.
func testResolved(t *testing.T) []Resolved {
	t.Helper()
	base := testLayer(t, "base", "shared base")
	app1 := testImage(t, "linux/amd64", base, testLayer(t, "app1", "one"))
	app2 := testImage(t, "linux/amd64", base, testLayer(t, "app2", "two"))
	multi := testIndex(t, "linux/amd64", "linux/arm64")
	return []Resolved{
		{Name: "docker.io/library/app1:1", Digest: digestOf(t, app1), Image: app1},
		{Name: "ghcr.io/x/app2:1", Digest: digestOf(t, app2), Image: app2},
		{Name: "ghcr.io/x/app1-alias:1", Image: app1},
		{Name: "quay.io/x/multi:1", Digest: digestOf(t, multi), Index: multi},
	}
}

func TestWriteLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	images := testResolved(t)
	final := map[string]int64{}
	m, err := WriteLayout(context.Background(), dir, images, WithProgress(func(image string, done, total int64) {
		if done == total {
			final[image] = total
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	validateLayout(t, dir, images)
	// app1: config, base, layer, manifest; app2 adds config, layer,
	// manifest; the alias adds nothing; the index adds 2x3 and itself.
	if n := countBlobs(t, dir); n != 14 || m.Blobs != 14 {
		t.Errorf("%d blob files, manifest says %d; want 14 (shared blobs once)", n, m.Blobs)
	}
	var sum int64
	for _, r := range m.Images {
		sum += r.Size
		if final[r.Name] != r.Size {
			t.Errorf("%s: progress ended at %d, want %d", r.Name, final[r.Name], r.Size)
		}
	}
	if m.Size >= sum {
		t.Errorf("layout size %d, want less than the images' total %d (dedup)", m.Size, sum)
	}
	if exists(dir + ".partial") {
		t.Error("dir.partial left behind")
	}
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("layout", "index.json"), index)
	record, _ := json.MarshalIndent(m, "", "  ")
	golden(t, filepath.Join("layout", "manifest.json"), append(record, '\n'))
}

// validateLayout reads the layout back and checks every entry.
func validateLayout(t *testing.T, dir string, images []Resolved) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(images) {
		t.Fatalf("index.json has %d entries, want %d", len(im.Manifests), len(images))
	}
	for i, d := range im.Manifests {
		want := images[i].Name
		if d.Annotations[RefNameAnnotation] != want || d.Annotations[ContainerdNameAnnotation] != want {
			t.Errorf("entry %d annotations %v, want both names %s", i, d.Annotations, want)
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err == nil {
				err = validate.Index(child)
			}
			if err != nil {
				t.Errorf("%s: %v", want, err)
			}
			continue
		}
		img, err := idx.Image(d.Digest)
		if err == nil {
			err = validate.Image(img)
		}
		if err != nil {
			t.Errorf("%s: %v", want, err)
		}
	}
}

func countBlobs(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestWriteLayoutReplaces(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	images := testResolved(t)
	for range 2 {
		if _, err := WriteLayout(context.Background(), dir, images[:1]); err != nil {
			t.Fatal(err)
		}
	}
	validateLayout(t, dir, images[:1])
	if exists(dir+".old") || exists(dir+".partial") {
		t.Error("temporary directories left behind")
	}
}

func TestWriteLayoutErrors(t *testing.T) {
	images := testResolved(t)
	corrupt := corruptImage(t)
	tests := []struct {
		name    string
		images  []Resolved
		wantErr []string
	}{
		{name: "corrupt blob", images: append(images[:2:2], Resolved{Name: "ghcr.io/x/bad:1", Image: corrupt}),
			wantErr: []string{"ghcr.io/x/bad:1: blob sha256:", "content does not match its descriptor"}},
		{name: "duplicate name", images: []Resolved{images[0], images[0]},
			wantErr: []string{"docker.io/library/app1:1: listed twice"}},
		{name: "wrong digest", images: []Resolved{{Name: "a.io/x:1", Image: images[0].Image, Digest: images[1].Digest}},
			wantErr: []string{"a.io/x:1: is " + images[0].Digest.String() + ", not the resolved " + images[1].Digest.String()}},
		{name: "no content", images: []Resolved{{Name: "a.io/x:1"}},
			wantErr: []string{"a.io/x:1: needs exactly one of Image and Index"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "images")
			_, err := WriteLayout(context.Background(), dir, tt.images)
			wantErr(t, err, tt.wantErr...)
			if exists(dir) || exists(dir+".partial") {
				t.Error("failed write left a directory behind")
			}
		})
	}
}

// TestWriteLayoutKeepsOldOnError checks a failed write leaves an existing
// layout alone.
func TestWriteLayoutKeepsOldOnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	images := testResolved(t)
	if _, err := WriteLayout(context.Background(), dir, images[:1]); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	_, err := WriteLayout(context.Background(), dir, []Resolved{{Name: "ghcr.io/x/bad:1", Image: corruptImage(t)}})
	wantErr(t, err, "content does not match")
	after, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if !bytes.Equal(before, after) || exists(dir+".partial") {
		t.Error("failed write changed the existing layout")
	}
}

// corruptImage is an image read from a layout whose layer blob was
// overwritten with garbage of the same size.
func corruptImage(t *testing.T) v1.Image {
	t.Helper()
	dir := t.TempDir()
	img := testImage(t, "linux/amd64", testLayer(t, "bad", "bad"))
	writeTestLayout(t, dir, map[string]any{"": img})
	layers, _ := img.Layers()
	h := digestOf(t, layers[0])
	p := filepath.Join(dir, "blobs", h.Algorithm, h.Hex)
	data, _ := os.ReadFile(p)
	if err := os.WriteFile(p, bytes.Repeat([]byte{0}, len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	bad, err := layout.Path(dir).Image(digestOf(t, img))
	if err != nil {
		t.Fatal(err)
	}
	return bad
}
