package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	layoutcontract "github.com/terrarium-os/terrarium/pkg/contract/layout"
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
	// Referrers are the artifacts carried with the image whose subject is
	// one of its manifests (signatures, SBOMs, attestations).
	Referrers []ReferrerRecord `json:"referrers,omitempty"`
}

// ReferrerRecord describes one referrer of an image of the layout.
type ReferrerRecord struct {
	Digest       string `json:"digest"`
	MediaType    string `json:"mediaType"`
	ArtifactType string `json:"artifactType,omitempty"`
}

// WriteLayout writes the images into one OCI image layout at dir, each
// blob once, with an index.json entry per image annotated with its full
// name (org.opencontainers.image.ref.name and io.containerd.image.name),
// and one per referrer of an image annotated with the image's repository
// (layout.BundleRepositoryAnnotation of pkg/contract/layout), which records
// it by digest alone where the node's registry lists it as a referrer.
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
		_ = os.RemoveAll(partial)
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
		for j, ref := range r.Referrers {
			if (ref.Image == nil) == (ref.Index == nil) {
				return fmt.Errorf("%s: referrer %d needs exactly one of Image and Index", r.Name, j)
			}
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
	recorded := map[string]bool{} // repository@digest of the referrers in index.json
	for _, r := range images {
		desc, bs, err := writeImage(ctx, dir, r, o)
		if err != nil {
			return Manifest{}, fmt.Errorf("%s: %w", r.Name, err)
		}
		if err := p.AppendDescriptor(desc); err != nil {
			return Manifest{}, fmt.Errorf("%s: index.json: %w", r.Name, err)
		}
		refs, rbs, err := writeReferrers(ctx, dir, p, r, recorded, o)
		if err != nil {
			return Manifest{}, fmt.Errorf("%s: %w", r.Name, err)
		}
		for _, b := range append(bs, rbs...) {
			sizes[b.digest] = b.size
		}
		m.Images = append(m.Images, ImageRecord{Name: r.Name, Digest: desc.Digest.String(),
			MediaType: string(desc.MediaType), Size: totalSize(bs), Referrers: refs})
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

// writeReferrers copies the image's referrers into the layout and records
// each in index.json by digest under the image's repository, once per
// repository (recorded holds those already written).
func writeReferrers(ctx context.Context, dir string, p layout.Path, r Resolved, recorded map[string]bool, o options) ([]ReferrerRecord, []blob, error) {
	repo := repositoryOf(r.Name)
	var recs []ReferrerRecord
	var all []blob
	for _, ref := range r.Referrers {
		a := ref.artifact()
		desc, err := a.descriptor()
		if err != nil {
			return nil, nil, fmt.Errorf("referrer: %w", err)
		}
		bs, err := a.blobs()
		if err == nil {
			err = copyBlobs(ctx, dir, bs, func(done, total int64) { o.progress(r.Name+" referrer "+desc.Digest.String(), done, total) })
		}
		if err != nil {
			return nil, nil, fmt.Errorf("referrer %s: %w", desc.Digest, err)
		}
		at, err := a.artifactType()
		if err != nil {
			return nil, nil, fmt.Errorf("referrer %s: %w", desc.Digest, err)
		}
		all = append(all, bs...)
		recs = append(recs, ReferrerRecord{Digest: desc.Digest.String(), MediaType: string(desc.MediaType), ArtifactType: at})
		if key := repo + "@" + desc.Digest.String(); !recorded[key] {
			recorded[key] = true
			desc.Annotations = map[string]string{layoutcontract.BundleRepositoryAnnotation: repo}
			if err := p.AppendDescriptor(desc); err != nil {
				return nil, nil, fmt.Errorf("referrer %s: index.json: %w", desc.Digest, err)
			}
		}
	}
	return recs, all, nil
}

// repositoryOf is the repository of a full image name: the name without
// its tag and digest ("docker.io/library/hello" for
// "docker.io/library/hello:1.0"), as the node's registry names it.
func repositoryOf(name string) string {
	name, _, _ = strings.Cut(name, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	return name
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
