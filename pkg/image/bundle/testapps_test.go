package bundle

import (
	"context"
	"path/filepath"
	"testing"
)

// TestTestAppsBundle resolves bundles/test-apps.yaml with real go builds and
// writes it as an OCI image layout, as imagebuild does.
func TestTestAppsBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three Go programs")
	}
	b, err := Parse(filepath.Join("..", "..", "..", "bundles", "test-apps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cacheDir := t.TempDir()
	images, err := Resolve(ctx, b, WithCacheDir(cacheDir), WithEpoch(testEpoch))
	if err != nil {
		t.Fatal(err)
	}
	c := &countingCompiler{next: GoTool{}}
	again, err := Resolve(ctx, b, WithCacheDir(cacheDir), WithEpoch(testEpoch), WithCompiler(c))
	if err != nil {
		t.Fatal(err)
	}
	if c.calls != 0 {
		t.Errorf("second resolve compiled %d times, want 0", c.calls)
	}
	for i := range images {
		if images[i].Digest != again[i].Digest {
			t.Errorf("%s: %s then %s", images[i].Name, images[i].Digest, again[i].Digest)
		}
		checkBuiltLayer(t, images[i].Image, filepath.Base(b.Images[i].Source.Build.Go))
	}
	dir := filepath.Join(t.TempDir(), "images")
	m, err := WriteLayout(ctx, dir, images)
	if err != nil {
		t.Fatal(err)
	}
	validateLayout(t, dir, images)
	if len(m.Images) != 3 {
		t.Errorf("manifest lists %d images, want 3", len(m.Images))
	}
}
