package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations naming an image in an OCI image layout's index.json.
const (
	// RefNameAnnotation is the OCI image spec's name annotation.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
	// ContainerdNameAnnotation is the name `ctr images import` gives an
	// image.
	ContainerdNameAnnotation = "io.containerd.image.name"
)

// layoutSource reads an image from an OCI image layout directory. It has no
// cache key: reading the layout is cheap, and the cache skips the blobs it
// already holds.
type layoutSource struct {
	written   string // the path as the bundle has it, for messages
	dir       string
	ref       string
	platforms []v1.Platform
}

func (s *layoutSource) String() string {
	if s.ref != "" {
		return fmt.Sprintf("layout %s (%s)", s.written, s.ref)
	}
	return "layout " + s.written
}

func (s *layoutSource) key(context.Context) (string, error) { return "", nil }

func (s *layoutSource) fetch(context.Context) (artifact, func(), error) {
	a, err := readLayout(s.dir, s.ref, s.platforms)
	return a, func() {}, err
}

// readLayout picks the image named ref (or the sole image, its referrers
// aside) from the OCI image layout at dir and narrows it to the platforms.
// The layout's artifacts whose subject is one of the picked manifests
// (signatures, SBOMs, attestations: index.json entries whose manifest has
// a subject) come with it.
func readLayout(dir, ref string, platforms []v1.Platform) (artifact, error) {
	p, err := layout.FromPath(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return artifact{}, fmt.Errorf("not an OCI image layout: %s has no index.json", dir)
	}
	if err != nil {
		return artifact{}, fmt.Errorf("not an OCI image layout: %w", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return artifact{}, fmt.Errorf("malformed OCI image layout: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return artifact{}, fmt.Errorf("malformed index.json: %w", err)
	}
	entries, err := readEntries(p, im.Manifests)
	if errors.Is(err, fs.ErrNotExist) {
		return artifact{}, fmt.Errorf("malformed OCI image layout: missing blob: %w", err)
	}
	if err != nil {
		return artifact{}, fmt.Errorf("malformed OCI image layout: %w", err)
	}
	candidates := im.Manifests
	if ref == "" {
		candidates = notReferrers(entries)
	}
	desc, err := pickEntry(candidates, ref)
	if err != nil {
		return artifact{}, err
	}
	a, err := artifactOf(idx, desc)
	if err == nil {
		a, err = selectPlatforms(a, platforms)
	}
	if err == nil {
		a.referrers, err = referrersOf(idx, entries, a)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return artifact{}, fmt.Errorf("malformed OCI image layout: missing blob: %w", err)
	}
	if err != nil {
		return artifact{}, fmt.Errorf("entry %s: %w", desc.Digest, err)
	}
	return a, nil
}

// pickEntry finds the index.json entry named ref: by its full name in the
// ref.name or containerd annotation, else by a ref.name holding only ref's
// tag (as `skopeo copy oci:dir:tag` writes). Without ref the layout must
// hold exactly one entry.
func pickEntry(ds []v1.Descriptor, ref string) (v1.Descriptor, error) {
	if ref == "" {
		if len(ds) != 1 {
			return v1.Descriptor{}, fmt.Errorf("holds %d images (%s); set ref to pick one", len(ds), entryNames(ds))
		}
		return ds[0], nil
	}
	for _, d := range ds {
		if d.Annotations[RefNameAnnotation] == ref || d.Annotations[ContainerdNameAnnotation] == ref {
			return d, nil
		}
	}
	if tag, err := name.NewTag(ref); err == nil {
		var found []v1.Descriptor
		for _, d := range ds {
			if d.Annotations[RefNameAnnotation] == tag.TagStr() {
				found = append(found, d)
			}
		}
		if len(found) == 1 {
			return found[0], nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("no image named %s (it has %s)", ref, entryNames(ds))
}

func entryNames(ds []v1.Descriptor) string {
	if len(ds) == 0 {
		return "none"
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Annotations[RefNameAnnotation]
		if names[i] == "" {
			names[i] = d.Annotations[ContainerdNameAnnotation]
		}
		if names[i] == "" {
			names[i] = d.Digest.String()
		}
	}
	return strings.Join(names, ", ")
}
