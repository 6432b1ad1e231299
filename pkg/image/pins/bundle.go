package pins

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
)

// WriteBundle renders the Kubernetes bundle into bundlesDir, locks the
// Debian layers to what the archive holds now, builds every image (through
// the cache, so unchanged images cost nothing) and writes the file again
// with the locks and each image's digest pinned. The file appears whole or
// not at all.
func (v *Versions) WriteBundle(ctx context.Context, componentsDir, bundlesDir string, log *slog.Logger, opts ...bundle.Option) (string, []bundle.Resolved, error) {
	final := filepath.Join(bundlesDir, v.BundleFile())
	partial := final + ".partial"
	defer func() { _ = os.Remove(partial) }() // gone once renamed into place
	render := func(p Pinned, what string) (*bundle.Bundle, error) {
		text, err := v.RenderBundle(componentsDir, bundlesDir, p)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(partial, text, 0o644); err != nil {
			return nil, fmt.Errorf("write bundle: %w", err)
		}
		b, err := bundle.Parse(partial)
		if err != nil {
			return nil, fmt.Errorf("the %s bundle is invalid (fix %s): %w", what, BundleTemplate, err)
		}
		return b, nil
	}
	b, err := render(Pinned{}, "rendered")
	if err != nil {
		return "", nil, err
	}
	pinned := Pinned{Digests: map[string]string{}, Locks: map[string][]bundle.DebianPackage{}}
	for _, img := range b.Images {
		if bs := img.Source.Build; bs != nil && bs.Debian != nil {
			lock, err := bundle.LockDebian(ctx, *bs.Debian, log)
			if err != nil {
				return "", nil, fmt.Errorf("%s: lock its Debian layer: %w", img.Name, err)
			}
			pinned.Locks[img.Name] = lock
		}
	}
	if b, err = render(pinned, "locked"); err != nil {
		return "", nil, err
	}
	res, err := bundle.Resolve(ctx, b, opts...)
	if err != nil {
		return "", nil, err
	}
	for _, r := range res {
		pinned.Digests[r.Name] = r.Digest.String()
	}
	if _, err := render(pinned, "pinned"); err != nil {
		return "", nil, err
	}
	if err := atomicfile.Replace(partial, final); err != nil {
		return "", nil, fmt.Errorf("write bundle: %w", err)
	}
	return final, res, nil
}
