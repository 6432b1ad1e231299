package build

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// bundleLayout is the slot's OCI layout of every bundle image.
type bundleLayout struct {
	dir      string           // the layout
	key      string           // content key of the layout (names and digests)
	manifest *bundle.Manifest // its images, for manifest.json
}

// imageNames are the names of the layout's images; none for no layout.
func (b *bundleLayout) imageNames() []string {
	if b == nil || b.manifest == nil {
		return nil
	}
	names := make([]string, 0, len(b.manifest.Images))
	for _, img := range b.manifest.Images {
		names = append(names, img.Name)
	}
	return names
}

// bundleOptions are how a build resolves bundle images: cached blobs and
// artifacts, the preferred source kind, the build's epoch, a line per
// image on the progress writer.
func bundleOptions(opt Options, epoch time.Time) []bundle.Option {
	return []bundle.Option{
		bundle.WithCacheDir(filepath.Join(opt.Cache.Root(), "bundle-blobs")),
		bundle.WithArtifactCache(opt.Cache), bundle.WithPreferredSource(opt.PreferSource),
		bundle.WithEpoch(epoch), bundle.WithLogger(opt.Log),
		bundle.WithProgress(imageProgress(opt.Progress)),
	}
}

// buildBundles resolves every image of the spec's bundles (cached by
// digest: a rebuild copies nothing it already has) and writes them into
// one OCI layout, itself cached by the names and digests it holds. No
// bundles, no layout (nil).
func buildBundles(ctx context.Context, c *cache.Cache, s *spec.Spec, opts []bundle.Option) (*bundleLayout, string, error) {
	if len(s.Bundles) == 0 {
		return nil, "(none)", nil
	}
	var all []bundle.Resolved
	seen := map[string]string{}
	for _, f := range s.Bundles {
		b, err := bundle.Parse(s.Resolve(f))
		if err != nil {
			return nil, "", err
		}
		res, err := bundle.Resolve(ctx, b, opts...)
		if err != nil {
			return nil, "", err
		}
		if err := addUnique(seen, res, f); err != nil {
			return nil, "", err
		}
		all = append(all, res...)
	}
	k := cache.NewKey("bundle-layout/v1")
	for _, img := range all {
		k.String(img.Name, img.Digest.String())
	}
	key, err := k.Sum()
	if err != nil {
		return nil, "", err
	}
	dir, cached, err := c.Fill(ctx, "bundle-layout", key, func(ctx context.Context, dir string) error {
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
		return nil, "", err
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, "", err
	}
	out := &bundleLayout{dir: filepath.Join(dir, "layout"), key: key, manifest: &bundle.Manifest{}}
	if err := json.Unmarshal(data, out.manifest); err != nil {
		return nil, "", fmt.Errorf("the bundle layout's manifest: %w", err)
	}
	return out, fmt.Sprintf("%d images %s", len(all), cachedNote(cached)), nil
}

// addUnique records the images of file in seen (name -> file), refusing
// an image another bundle file already has: two bundles would disagree on
// what the name means.
func addUnique(seen map[string]string, images []bundle.Resolved, file string) error {
	for _, img := range images {
		if prev, ok := seen[img.Name]; ok {
			return fmt.Errorf("image %s is in both %s and %s; keep it in one of them", img.Name, prev, file)
		}
		seen[img.Name] = file
	}
	return nil
}

// imageProgress prints a line per image to w as it completes.
func imageProgress(w io.Writer) bundle.ProgressFunc {
	var mu sync.Mutex
	reported := map[string]bool{}
	return func(image string, done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if done < total || reported[image] {
			return
		}
		reported[image] = true
		_, _ = fmt.Fprintf(w, "      %-48s %8.1f MiB\n", image, float64(total)/(1<<20)) // progress only
	}
}
