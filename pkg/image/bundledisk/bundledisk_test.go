package bundledisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/node/registry"
)

// TestWriteIsAddable writes a bundle disk for the side-load test bundle,
// checks the ext4 label, extracts the layout with debugfs and adds it to a
// registry cache the way a node does.
func TestWriteIsAddable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	m, err := Write(ctx, "../../../bundles/sideload-test.yaml", img, bundle.WithCacheDir(filepath.Join(dir, "cache")))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Images) != 1 || m.Images[0].Name != "quay.io/terrarium/sideloaded:1.0" {
		t.Fatalf("manifest = %+v", m)
	}
	out, err := exec.Command("dumpe2fs", "-h", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs (run make deps): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Filesystem volume name:   "+Label) {
		t.Fatalf("bundle disk label is not %s:\n%s", Label, out)
	}
	layout := filepath.Join(dir, "extracted")
	if err := os.Mkdir(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("debugfs", "-R", "rdump / "+layout, img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs rdump: %v\n%s", err, out)
	}
	cache, err := registry.OpenCache(filepath.Join(dir, "node-cache"))
	if err != nil {
		t.Fatal(err)
	}
	refs, err := cache.AddLayout(ctx, layout)
	if err != nil {
		t.Fatalf("AddLayout of the disk's content: %v", err)
	}
	if len(refs) != 1 || refs[0] != "quay.io/terrarium/sideloaded:1.0" {
		t.Fatalf("refs = %v", refs)
	}
}

func TestWriteBadBundleLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "bundle.img")
	if _, err := Write(context.Background(), "../../../bundles/does-not-exist.yaml", img); err == nil {
		t.Fatal("Write of a missing bundle file succeeded")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}
}
