//go:build e2e

package qemutests

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/pins"
)

// TestKubernetesBundleFromCleanCache rebuilds every image of the
// Kubernetes bundle into empty caches: each must come out with the digest
// the bundle pins (Resolve fails otherwise), i.e. the images are
// reproducible from source. The Go build cache is shared; it holds
// compiled packages, not the binaries or images compared here.
func TestKubernetesBundleFromCleanCache(t *testing.T) {
	v, err := pins.Load("../components")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Parse(filepath.Join("..", "bundles", v.BundleFile()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := bundle.Resolve(context.Background(), b, bundle.WithCacheDir(t.TempDir()), bundle.WithArtifactCache(c))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if want := b.Images[i].Source.Digest; want == "" || r.Digest.String() != want {
			t.Errorf("%s: rebuilt %s, the bundle pins %q", r.Name, r.Digest, want)
		}
	}
	t.Logf("rebuilt %d images from an empty cache in %s, every digest as pinned", len(res), time.Since(start).Round(time.Second))
}
