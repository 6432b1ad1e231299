package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Manifest records what WriteLayout wrote, for the OS image's manifest.json.
type Manifest struct {
	// Images in the order they were written.
	Images []ImageRecord `json:"images"`
	// Blobs is the number of distinct blobs in the layout and Size their
	// total bytes.
	Blobs int   `json:"blobs"`
	Size  int64 `json:"size"`
}

// ImageRecord describes one image of the layout.
type ImageRecord struct {
	Name      string `json:"name"`
	Digest    string `json:"digest"`
	MediaType string `json:"mediaType"`
	// Size is the total of the image's distinct blobs: its manifests,
	// configs and layers, shared ones included.
	Size int64 `json:"size"`
}

// WriteLayout writes the images into one OCI image layout at dir, each
// blob once, with an index.json entry per image annotated with its full
// name (org.opencontainers.image.ref.name and io.containerd.image.name).
// Every blob is verified against its digest as it is copied. The layout is
// written to dir.partial and renamed to dir (replacing an existing dir)
// only when complete: on error neither is left behind.
func WriteLayout(ctx context.Context, dir string, images []Resolved, opts ...Option) (Manifest, error) {
	o := newOptions(opts)
	if err := checkResolved(images); err != nil {
		return Manifest{}, fmt.Errorf("write image layout %s: %w", dir, err)
	}
	partial := dir + ".partial"
	if err := os.RemoveAll(partial); err != nil {
		return Manifest{}, fmt.Errorf("write image layout %s: %w", dir, err)
	}
	m, err := writeLayout(ctx, partial, images, o)
	if err == nil {
		err = replaceDir(partial, dir)
	}
	if err != nil {
		os.RemoveAll(partial)
		return Manifest{}, fmt.Errorf("write image layout %s: %w", dir, err)
	}
	o.log.Info("wrote image layout", "dir", dir, "images", len(m.Images), "blobs", m.Blobs, "bytes", m.Size)
	return m, nil
}

func checkResolved(images []Resolved) error {
	seen := map[string]bool{}
	for i, r := range images {
		switch {
		case r.Name == "":
			return fmt.Errorf("image %d has no name", i)
		case seen[r.Name]:
			return fmt.Errorf("%s: listed twice", r.Name)
		case (r.Image == nil) == (r.Index == nil):
			return fmt.Errorf("%s: needs exactly one of Image and Index", r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

func writeLayout(ctx context.Context, dir string, images []Resolved, o options) (Manifest, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Images: []ImageRecord{}}
	sizes := map[v1.Hash]int64{}
	for _, r := range images {
		desc, bs, err := writeImage(ctx, dir, r, o)
		if err != nil {
			return Manifest{}, fmt.Errorf("%s: %w", r.Name, err)
		}
		if err := p.AppendDescriptor(desc); err != nil {
			return Manifest{}, fmt.Errorf("%s: index.json: %w", r.Name, err)
		}
		for _, b := range bs {
			sizes[b.digest] = b.size
		}
		m.Images = append(m.Images, ImageRecord{Name: r.Name, Digest: desc.Digest.String(),
			MediaType: string(desc.MediaType), Size: totalSize(bs)})
	}
	m.Blobs = len(sizes)
	for _, n := range sizes {
		m.Size += n
	}
	return m, nil
}

// writeImage copies the blobs of one image and returns its index.json entry.
func writeImage(ctx context.Context, dir string, r Resolved, o options) (v1.Descriptor, []blob, error) {
	a := r.artifact()
	desc, err := a.descriptor()
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	if r.Digest != (v1.Hash{}) && r.Digest != desc.Digest {
		return v1.Descriptor{}, nil, fmt.Errorf("is %s, not the resolved %s", desc.Digest, r.Digest)
	}
	bs, err := a.blobs()
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	if err := copyBlobs(ctx, dir, bs, func(done, total int64) { o.progress(r.Name, done, total) }); err != nil {
		return v1.Descriptor{}, nil, err
	}
	desc.Annotations = map[string]string{RefNameAnnotation: r.Name, ContainerdNameAnnotation: r.Name}
	if r.Image != nil {
		if cfg, err := r.Image.ConfigFile(); err == nil && cfg.OS != "" {
			desc.Platform = &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		}
	}
	return desc, bs, nil
}

// replaceDir renames src to dst, replacing an existing dst.
func replaceDir(src, dst string) error {
	_, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return os.Rename(src, dst)
	}
	if err != nil {
		return err
	}
	old := dst + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(dst, old); err != nil {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		if rerr := os.Rename(old, dst); rerr != nil {
			return errors.Join(err, fmt.Errorf("restoring %s: %w", dst, rerr))
		}
		return err
	}
	return os.RemoveAll(old)
}
