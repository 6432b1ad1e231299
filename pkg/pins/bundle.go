package pins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/bundle"
)

// WriteBundle renders the Kubernetes bundle into bundlesDir, builds every
// image (through the cache, so unchanged images cost nothing) and writes
// the file again with each image's digest pinned. The file appears whole
// or not at all.
func (v *Versions) WriteBundle(ctx context.Context, componentsDir, bundlesDir string, opts ...bundle.Option) (string, []bundle.Resolved, error) {
	final := filepath.Join(bundlesDir, v.BundleFile())
	partial := final + ".partial"
	defer os.Remove(partial)
	unpinned, err := v.RenderBundle(componentsDir, nil)
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(partial, unpinned, 0o644); err != nil {
		return "", nil, fmt.Errorf("write bundle: %w", err)
	}
	b, err := bundle.Parse(partial)
	if err != nil {
		return "", nil, fmt.Errorf("the rendered bundle is invalid (fix %s): %w", BundleTemplate, err)
	}
	res, err := bundle.Resolve(ctx, b, opts...)
	if err != nil {
		return "", nil, err
	}
	digests := map[string]string{}
	for _, r := range res {
		digests[r.Name] = r.Digest.String()
	}
	pinned, err := v.RenderBundle(componentsDir, digests)
	if err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(partial, pinned, 0o644); err != nil {
		return "", nil, fmt.Errorf("write bundle: %w", err)
	}
	if _, err := bundle.Parse(partial); err != nil {
		return "", nil, fmt.Errorf("the pinned bundle is invalid (fix %s): %w", BundleTemplate, err)
	}
	if err := os.Rename(partial, final); err != nil {
		return "", nil, fmt.Errorf("write bundle: %w", err)
	}
	return final, res, nil
}
