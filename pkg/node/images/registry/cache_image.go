package registry

import (
	"bytes"
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// AddImage stores img (its manifest, config and layers) in the cache and
// records it as ref, a full reference such as "registry.k8s.io/pause:3.10".
// Every blob is verified against its digest as it is written.
func (c *Cache) AddImage(ctx context.Context, ref string, img v1.Image) (v1.Descriptor, error) {
	repo, tag, err := splitTaggedRef(ref)
	if err != nil {
		return v1.Descriptor{}, err
	}
	cp := c.newCopier(nil, "")
	desc, raw, err := cp.image(ctx, img)
	if err == nil {
		err = c.record(record{repo: repo, tag: tag, desc: desc, raw: raw})
	}
	if err != nil {
		cp.rollback()
		return v1.Descriptor{}, fmt.Errorf("add image %s: %w", ref, err)
	}
	return desc, nil
}

// AddIndex stores idx with every image and index it references in the
// cache, and records it as ref.
func (c *Cache) AddIndex(ctx context.Context, ref string, idx v1.ImageIndex) (v1.Descriptor, error) {
	repo, tag, err := splitTaggedRef(ref)
	if err != nil {
		return v1.Descriptor{}, err
	}
	cp := c.newCopier(nil, "")
	desc, raw, err := cp.index(ctx, idx)
	if err == nil {
		err = c.record(record{repo: repo, tag: tag, desc: desc, raw: raw})
	}
	if err != nil {
		cp.rollback()
		return v1.Descriptor{}, fmt.Errorf("add index %s: %w", ref, err)
	}
	return desc, nil
}

func splitTaggedRef(ref string) (repo, tag string, err error) {
	repo, tag, digest := splitRef(ref)
	if repo == "" || tag == "" || digest != "" {
		return "", "", fmt.Errorf("reference %q: want host/path:tag", ref)
	}
	return repo, tag, nil
}

func (cp *copier) image(ctx context.Context, img v1.Image) (v1.Descriptor, []byte, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("image manifest: %w", err)
	}
	desc, err := describe(img, raw)
	if err != nil {
		return desc, nil, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return desc, nil, fmt.Errorf("image %s config: %w", desc.Digest, err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return desc, nil, fmt.Errorf("image %s config: %w", desc.Digest, err)
	}
	if err := cp.put(ctx, cfgName, int64(len(cfg)), bytes.NewReader(cfg)); err != nil {
		return desc, nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return desc, nil, fmt.Errorf("image %s layers: %w", desc.Digest, err)
	}
	for _, l := range layers {
		if err := cp.layer(ctx, l); err != nil {
			return desc, nil, fmt.Errorf("image %s: %w", desc.Digest, err)
		}
	}
	if err := cp.put(ctx, desc.Digest, desc.Size, bytes.NewReader(raw)); err != nil {
		return desc, nil, err
	}
	return desc, raw, nil
}

func (cp *copier) layer(ctx context.Context, l v1.Layer) error {
	d, err := l.Digest()
	if err != nil {
		return fmt.Errorf("layer digest: %w", err)
	}
	size, err := l.Size()
	if err != nil {
		return fmt.Errorf("layer %s: %w", d, err)
	}
	if cp.done[d] || cp.c.present(d, size) {
		return nil
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("layer %s: %w", d, err)
	}
	defer rc.Close()
	return cp.put(ctx, d, size, rc)
}

func (cp *copier) index(ctx context.Context, idx v1.ImageIndex) (v1.Descriptor, []byte, error) {
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("index manifest: %w", err)
	}
	desc, err := describe(idx, raw)
	if err != nil {
		return desc, nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return desc, nil, fmt.Errorf("index %s: %w", desc.Digest, err)
	}
	for _, child := range im.Manifests {
		switch {
		case child.MediaType.IsIndex():
			ci, err := idx.ImageIndex(child.Digest)
			if err == nil {
				_, _, err = cp.index(ctx, ci)
			}
			if err != nil {
				return desc, nil, fmt.Errorf("index %s: child %s: %w", desc.Digest, child.Digest, err)
			}
		case child.MediaType.IsImage():
			ci, err := idx.Image(child.Digest)
			if err == nil {
				_, _, err = cp.image(ctx, ci)
			}
			if err != nil {
				return desc, nil, fmt.Errorf("index %s: child %s: %w", desc.Digest, child.Digest, err)
			}
		default:
			return desc, nil, fmt.Errorf("index %s: child %s has unsupported media type %q", desc.Digest, child.Digest, child.MediaType)
		}
	}
	if err := cp.put(ctx, desc.Digest, desc.Size, bytes.NewReader(raw)); err != nil {
		return desc, nil, err
	}
	return desc, raw, nil
}

// described is what v1.Image and v1.ImageIndex have in common.
type described interface {
	Digest() (v1.Hash, error)
	MediaType() (types.MediaType, error)
}

func describe(x described, raw []byte) (v1.Descriptor, error) {
	d, err := x.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("digest: %w", err)
	}
	mt, err := x.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s media type: %w", d, err)
	}
	return v1.Descriptor{MediaType: mt, Size: int64(len(raw)), Digest: d}, nil
}
