package bundle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// Resolved is an image of a bundle, resolved to content. Exactly one of
// Image and Index is set: Index when the bundle wants several platforms.
type Resolved struct {
	// Name is the image's full upstream name from the bundle.
	Name string
	// Digest is the digest of the image's manifest (or index).
	Digest v1.Hash
	Image  v1.Image
	Index  v1.ImageIndex
	// Source describes where the image came from, e.g.
	// "registry registry.k8s.io/pause@sha256:..." or "build ./hello".
	Source string
	// Referrers are the artifacts whose subject is the image's manifest
	// or one under its index, carried with it (from a layout source).
	Referrers []Referrer
}

// MediaType is the media type of the image's manifest (or index).
func (r Resolved) MediaType() (types.MediaType, error) {
	d, err := r.artifact().descriptor()
	return d.MediaType, err
}

func (r Resolved) artifact() artifact {
	return artifact{image: r.Image, index: r.Index}
}

// source produces the content of one image.
type source interface {
	// key identifies what the source produces, for the cache, or is ""
	// when only reading the source tells.
	key(ctx context.Context) (string, error)
	// fetch reads or builds the content, already narrowed to the bundle's
	// platforms. done releases temporary files once it has been copied.
	fetch(ctx context.Context) (a artifact, done func(), err error)
	// String describes the source, e.g. "build ./testimages/hello".
	String() string
}

// Resolve turns every image of the bundle into content: it pulls registry
// sources, builds build sources and reads layout and tarball sources, keeps
// the bundle's platforms only, checks digest pins and stores the result in
// the cache (see WithCacheDir). The returned images are read from the cache;
// an image whose recipe is already cached is neither pulled nor built.
//
// Errors start with the image's name, e.g.
// "docker.io/library/hello:1.0: resolved to sha256:... but the bundle pins sha256:...".
func Resolve(ctx context.Context, b *Bundle, opts ...Option) ([]Resolved, error) {
	o := newOptions(opts)
	bb := *b
	bb.setDefaults()
	if err := bb.Validate(); err != nil {
		if p, ok := errors.AsType[strictyaml.Problems](err); ok {
			return nil, p.WithFile(b.label())
		}
		return nil, err
	}
	plats, err := parsePlatforms(bb.Platforms)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.label(), err)
	}
	st, err := openStore(o.cacheDir)
	if err != nil {
		return nil, err
	}
	switch o.preferred {
	case "", "registry", "build", "layout", "tarball":
	default:
		return nil, fmt.Errorf("unknown source kind %q to prefer (registry, build, layout or tarball)", o.preferred)
	}
	if bb.SourceDateEpoch > 0 {
		o.epoch = time.Unix(bb.SourceDateEpoch, 0).UTC()
	}
	r := &resolver{opts: o, store: st, bundle: &bb, platforms: plats}
	out := make([]Resolved, 0, len(bb.Images))
	for _, img := range bb.Images {
		res, err := r.resolve(ctx, img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", img.Name, err)
		}
		out = append(out, res)
	}
	return out, nil
}

type resolver struct {
	opts      options
	store     *store
	bundle    *Bundle
	platforms []v1.Platform
}

func (r *resolver) resolve(ctx context.Context, img Image) (Resolved, error) {
	chosen, err := r.pick(img)
	if err != nil {
		return Resolved{}, err
	}
	src := r.source(chosen)
	key, err := src.key(ctx)
	if err != nil {
		return Resolved{}, fmt.Errorf("%s: %w", src, err)
	}
	cached := false
	var a artifact
	if key != "" {
		if a, cached, err = r.store.lookup(key); err != nil {
			return Resolved{}, err
		}
	}
	if !cached {
		if a, err = r.produce(ctx, img.Name, src, key); err != nil {
			return Resolved{}, err
		}
	}
	desc, err := a.descriptor()
	if err != nil {
		return Resolved{}, fmt.Errorf("%s: %w", src, err)
	}
	if pin := chosen.Digest; pin != "" && pin != desc.Digest.String() {
		return Resolved{}, fmt.Errorf("resolved to %s but the bundle pins %s", desc.Digest, pin)
	}
	r.opts.log.Info("resolved image", "image", img.Name, "digest", desc.Digest.String(),
		"source", src.String(), "cached", cached, "referrers", len(a.referrers))
	return Resolved{Name: img.Name, Digest: desc.Digest, Image: a.image, Index: a.index, Source: src.String(),
		Referrers: a.referrerList()}, nil
}

// produce fetches the source's content and stores it in the cache under
// key (or, for a source without one, under its digest).
func (r *resolver) produce(ctx context.Context, name string, src source, key string) (artifact, error) {
	a, done, err := src.fetch(ctx)
	if err != nil {
		return artifact{}, fmt.Errorf("%s: %w", src, err)
	}
	defer done()
	if key == "" {
		desc, err := a.descriptor()
		if err != nil {
			return artifact{}, fmt.Errorf("%s: %w", src, err)
		}
		key, err = cache.NewKey("bundle-content/v1").String("digest", desc.Digest.String()).Sum()
		if err != nil {
			return artifact{}, err
		}
	}
	progress := func(done, total int64) { r.opts.progress(name, done, total) }
	stored, err := r.store.put(ctx, key, a, progress)
	if err != nil {
		return artifact{}, fmt.Errorf("%s: %w", src, err)
	}
	return stored, nil
}

// pick chooses the image's source: its first alternative of the preferred
// kind, if one was asked for and it has one, else its source.
func (r *resolver) pick(img Image) (Source, error) {
	want := r.opts.preferred
	if want == "" || slices.Contains(img.Source.kinds(), want) {
		return img.Source, nil
	}
	for i, alt := range img.Alternatives {
		if !slices.Contains(alt.kinds(), want) {
			continue
		}
		if alt.Registry != nil && !strings.Contains(alt.Registry.Ref, "@") && alt.Digest == "" {
			return Source{}, fmt.Errorf("alternatives[%d]: %s is not pinned; add the digest it must resolve to (digest: sha256:...) before pulling it", i, alt.Registry.Ref)
		}
		return alt, nil
	}
	return img.Source, nil
}

func (r *resolver) source(s Source) source {
	b := r.bundle
	switch {
	case s.Registry != nil:
		return &registrySource{ref: s.Registry.Ref, pin: s.Digest, insecure: s.Registry.Insecure,
			platforms: r.platforms, keychain: r.opts.keychain}
	case s.Build != nil && s.Build.Component != "":
		return &componentSource{spec: *s.Build, dir: b.Abs(s.Build.Component), platforms: r.platforms,
			epoch: r.opts.epoch, cache: r.opts.artifactCache, log: r.opts.log}
	case s.Build != nil:
		return &buildSource{spec: *s.Build, dir: b.Abs(s.Build.Go), platforms: r.platforms,
			epoch: r.opts.epoch, compiler: r.opts.compiler, goCmd: r.opts.goCmd, log: r.opts.log}
	case s.Layout != nil:
		return &layoutSource{written: s.Layout.Path, dir: b.Abs(s.Layout.Path), ref: s.Layout.Ref, platforms: r.platforms}
	default:
		return &tarballSource{written: s.Tarball.Path, path: b.Abs(s.Tarball.Path), ref: s.Tarball.Ref, platforms: r.platforms}
	}
}

// platformStrings formats platforms for cache keys.
func platformStrings(ps []v1.Platform) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}
