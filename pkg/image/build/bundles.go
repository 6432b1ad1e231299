package build

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// bundleLayout is the slot's OCI layout of every bundle image.
type bundleLayout struct {
	dir string // the layout
	key string // content key of the layout (names and digests)
}

// buildBundles resolves every image of the spec's bundles (cached by
// digest: a rebuild copies nothing it already has) and writes them into
// one OCI layout, itself cached by the names and digests it holds.
func (r *run) buildBundles(ctx context.Context) (string, error) {
	if len(r.spec.Bundles) == 0 {
		return "(none)", nil
	}
	var all []bundle.Resolved
	seen := map[string]string{}
	opts := []bundle.Option{
		bundle.WithCacheDir(filepath.Join(r.opt.Cache.Root(), "bundle-blobs")),
		bundle.WithArtifactCache(r.opt.Cache), bundle.WithPreferredSource(r.opt.PreferSource),
		bundle.WithEpoch(r.spec.Epoch()), bundle.WithLogger(r.opt.Log),
		bundle.WithProgress(r.imageProgress()),
	}
	for _, f := range r.spec.Bundles {
		b, err := bundle.Parse(r.spec.Resolve(f))
		if err != nil {
			return "", err
		}
		res, err := bundle.Resolve(ctx, b, opts...)
		if err != nil {
			return "", err
		}
		for _, img := range res {
			if prev, ok := seen[img.Name]; ok {
				return "", fmt.Errorf("image %s is in both %s and %s", img.Name, prev, f)
			}
			seen[img.Name] = f
		}
		all = append(all, res...)
	}
	k := cache.NewKey("bundle-layout/v1")
	for _, img := range all {
		k.String(img.Name, img.Digest.String())
	}
	key, err := k.Sum()
	if err != nil {
		return "", err
	}
	dir, cached, err := r.opt.Cache.Fill(ctx, "bundle-layout", key, func(ctx context.Context, dir string) error {
		m, err := bundle.WriteLayout(ctx, filepath.Join(dir, "layout"), all, opts...)
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
	})
	if err != nil {
		return "", err
	}
	r.bundle = &bundleLayout{dir: filepath.Join(dir, "layout"), key: key}
	if err := r.man.addBundle(filepath.Join(dir, "manifest.json")); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d images %s", len(all), cachedNote(cached)), nil
}

// imageProgress prints a line per image as it completes.
func (r *run) imageProgress() bundle.ProgressFunc {
	var mu sync.Mutex
	reported := map[string]bool{}
	return func(image string, done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if done < total || reported[image] {
			return
		}
		reported[image] = true
		fmt.Fprintf(r.opt.Progress, "      %-48s %8.1f MiB\n", image, float64(total)/(1<<20))
	}
}
