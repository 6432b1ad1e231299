package bundle

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// parsePlatforms parses validated os/arch[/variant] strings.
func parsePlatforms(ss []string) ([]v1.Platform, error) {
	out := make([]v1.Platform, 0, len(ss))
	for _, s := range ss {
		if msg := checkPlatform(s); msg != "" {
			return nil, fmt.Errorf("platform %s", msg)
		}
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", s, err)
		}
		out = append(out, *p)
	}
	return out, nil
}

func platformList(ps []v1.Platform) string {
	return strings.Join(platformStrings(ps), ", ")
}

// selectPlatforms keeps the wanted platforms of a: from an index, the
// single image when one platform is wanted, the index itself when it holds
// exactly the wanted platforms, and otherwise a new index of just those;
// a single image must be of the one wanted platform (or name none).
func selectPlatforms(a artifact, want []v1.Platform) (artifact, error) {
	if a.index == nil {
		return checkImagePlatform(a.image, want)
	}
	im, err := a.index.IndexManifest()
	if err != nil {
		return artifact{}, fmt.Errorf("index manifest: %w", err)
	}
	var picked []v1.Descriptor
	seen := map[v1.Hash]bool{}
	for _, w := range want {
		d, ok := findPlatform(im.Manifests, w)
		if !ok {
			return artifact{}, fmt.Errorf("has no %s image (it has %s)", w, indexPlatforms(im.Manifests))
		}
		if !seen[d.Digest] {
			seen[d.Digest] = true
			picked = append(picked, d)
		}
	}
	if len(picked) == 1 {
		img, err := a.index.Image(picked[0].Digest)
		if err != nil {
			return artifact{}, fmt.Errorf("%s image: %w", want[0], err)
		}
		return artifact{image: img}, nil
	}
	if len(picked) == len(im.Manifests) {
		return a, nil // wanted platforms are all it has: keep the upstream digest
	}
	return subIndex(a.index, im.MediaType, picked)
}

// findPlatform returns the first image manifest of platform w.
func findPlatform(ds []v1.Descriptor, w v1.Platform) (v1.Descriptor, bool) {
	for _, d := range ds {
		if d.Platform != nil && d.MediaType.IsImage() && d.Platform.Satisfies(w) {
			return d, true
		}
	}
	return v1.Descriptor{}, false
}

func indexPlatforms(ds []v1.Descriptor) string {
	var s []string
	for _, d := range ds {
		if d.Platform != nil && d.MediaType.IsImage() {
			s = append(s, d.Platform.String())
		}
	}
	if len(s) == 0 {
		return "no platform images"
	}
	return strings.Join(s, ", ")
}

// subIndex makes an index of the picked manifests of idx.
func subIndex(idx v1.ImageIndex, mt types.MediaType, picked []v1.Descriptor) (artifact, error) {
	if mt == "" {
		mt = types.OCIImageIndex
	}
	adds := make([]mutate.IndexAddendum, 0, len(picked))
	for _, d := range picked {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return artifact{}, fmt.Errorf("%s image: %w", d.Platform, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: d})
	}
	return artifact{index: mutate.AppendManifests(mutate.IndexMediaType(empty.Index, mt), adds...)}, nil
}

func checkImagePlatform(img v1.Image, want []v1.Platform) (artifact, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return artifact{}, fmt.Errorf("config: %w", err)
	}
	have := cfg.Platform()
	if have == nil {
		have = &v1.Platform{}
	}
	if len(want) != 1 {
		return artifact{}, fmt.Errorf("is a single-platform image (%s) but the bundle wants %s", have, platformList(want))
	}
	if have.OS == "" && have.Architecture == "" {
		return artifact{image: img}, nil // says nothing about its platform: trust the bundle
	}
	if !have.Satisfies(want[0]) {
		return artifact{}, fmt.Errorf("is a %s image but the bundle wants %s", have, want[0])
	}
	return artifact{image: img}, nil
}
