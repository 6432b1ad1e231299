// Package layers unpacks the layers of a bundle's images at build time,
// into the form containerd's overlayfs snapshotter keeps a committed
// snapshot in: one directory per layer, its diff applied with overlayfs'
// whiteouts (a deleted path is a 0/0 character device, an opaque directory
// carries trusted.overlay.opaque=y). The directories go into the slot's
// read-only squashfs, named by the layer's diffID, and the node's
// snapshotter hands them to containerd as the layers' snapshots: a bundled
// image is runnable at first boot with no layer fetched, decompressed or
// written, and a power cut cannot tear what is never written.
//
// Unpacking needs root: whiteouts are device nodes, opaque directories
// trusted.* extended attributes.
package layers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/containerd/containerd/v2/pkg/archive"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	layoutcontract "github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Result is what Unpack did.
type Result struct {
	// Images is how many images' layers were looked at, Layers how many
	// distinct layers there are.
	Images, Layers int
	// Unpacked is how many layers were unpacked now (the others were in
	// dst already), Bytes what their files hold.
	Unpacked int
	Bytes    int64
}

// Dir is where a layer with diffID is unpacked under dst
// (pkg/contract/layout.SlotLayer: the contract with the node's snapshotter).
func Dir(dst string, diffID v1.Hash) string {
	if dir, ok := layoutcontract.SlotLayer(dst, diffID.String()); ok {
		return dir
	}
	return filepath.Join(dst, diffID.Algorithm, diffID.Hex)
}

// Unpack unpacks every layer of every image in the OCI layout dir (images
// under image indexes included) into dst, once per diffID; a layer's
// directory appears whole or not at all. report hears each layer as it is
// unpacked.
func Unpack(ctx context.Context, dir, dst string, report func(string)) (Result, error) {
	if report == nil {
		report = func(string) {}
	}
	if os.Geteuid() != 0 {
		return Result{}, errors.New("unpacking layers needs root (overlayfs whiteouts are device nodes and trusted.* attributes)")
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return Result{}, fmt.Errorf("open bundle layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return Result{}, fmt.Errorf("read bundle layout %s: %w", dir, err)
	}
	imgs, err := images(idx)
	if err != nil {
		return Result{}, fmt.Errorf("bundle layout %s: %w", dir, err)
	}
	var res Result
	res.Images = len(imgs)
	layers := map[v1.Hash]v1.Layer{}
	for _, img := range imgs {
		// containerd names a layer's snapshot by the diffIDs the image's
		// config lists, and trusts a snapshot it finds: each layer is
		// unpacked under its config's diffID and checked against it.
		cfg, err := img.ConfigFile()
		if err != nil {
			return res, err
		}
		ls, err := img.Layers()
		if err != nil {
			return res, err
		}
		if len(ls) != len(cfg.RootFS.DiffIDs) {
			return res, fmt.Errorf("an image of bundle %s has %d layers and %d diffIDs in its config", dir, len(ls), len(cfg.RootFS.DiffIDs))
		}
		for i, l := range ls {
			layers[cfg.RootFS.DiffIDs[i]] = l
		}
	}
	ids := make([]v1.Hash, 0, len(layers))
	for d := range layers {
		ids = append(ids, d)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	res.Layers = len(ids)
	for _, d := range ids {
		target := Dir(dst, d)
		if _, err := os.Stat(target); err == nil {
			continue
		}
		n, err := unpackLayer(ctx, layers[d], d, target)
		if err != nil {
			return res, err
		}
		res.Unpacked++
		res.Bytes += n
		report(fmt.Sprintf("layer %s: %d MiB", d.Hex[:12], n>>20))
	}
	return res, nil
}

// unpackLayer applies one layer into target, through a temporary sibling
// renamed into place once whole, and checks what it read against diffID.
func unpackLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, target string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return 0, err
	}
	tmp := target + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, err
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return 0, err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", diffID, err)
	}
	defer rc.Close()
	h, err := v1.Hasher(diffID.Algorithm)
	if err != nil {
		return 0, err
	}
	n, err := archive.Apply(ctx, tmp, io.TeeReader(rc, h), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
	if err == nil {
		// The rest of the stream (tar padding) counts for the digest.
		_, err = io.Copy(h, rc)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("unpack layer %s: %w", diffID, err)
	}
	if got := (v1.Hash{Algorithm: diffID.Algorithm, Hex: fmt.Sprintf("%x", h.Sum(nil))}); got != diffID {
		_ = os.RemoveAll(tmp)
		return 0, fmt.Errorf("unpack layer %s: its content is %s", diffID, got)
	}
	if err := os.Rename(tmp, target); err != nil {
		return 0, err
	}
	return n, nil
}

// isArtifact reports whether an image manifest is an artifact rather than
// a container image.
func isArtifact(m *v1.Manifest) bool {
	switch m.Config.MediaType {
	case "", types.OCIConfigJSON, types.DockerConfigJSON:
		return m.Subject != nil
	}
	return true
}

// images are the images of idx and of the indexes it holds. Artifacts
// (signatures, SBOMs, attestations a bundle carries as referrers of its
// images) are not images to run and are left out: a manifest with a
// subject, or whose config is not an image's.
func images(idx v1.ImageIndex) ([]v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []v1.Image
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			imgs, err := images(child)
			if err != nil {
				return nil, err
			}
			out = append(out, imgs...)
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			m, err := img.Manifest()
			if err != nil {
				return nil, err
			}
			if isArtifact(m) {
				continue
			}
			out = append(out, img)
		}
	}
	return out, nil
}
