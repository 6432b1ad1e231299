// Package bundledisk writes side-load disks: an ext4 filesystem labelled
// TERRA-BUNDLE holding one OCI layout, which a node's registry verifies and
// adds to its cache when the disk is attached (at boot or later).
package bundledisk

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
)

// Label is the filesystem label the registry looks for.
const Label = layout.LabelBundle

// Signing is how Write signs a disk.
type Signing struct {
	// Key signs the layout's index.json for bundles
	// (layout.BundleIndexSignature beside it); nil: the disk is unsigned,
	// which only a node that trusts no key takes.
	Key ed25519.PrivateKey
	// ReplaceTags are names of the bundle's images ("host/path:tag")
	// whose index.json entries say they replace the image a node holds
	// under that name (layout.BundleReplacesAnnotation). A node honours
	// that only in a disk signed by a key it trusts for bundles, so they
	// need Key.
	ReplaceTags []string
}

// Write resolves the bundle file's images and writes the disk image to
// out, signed as s says. Nothing is left at out when it fails.
func Write(ctx context.Context, bundleFile, out string, s Signing, opts ...bundle.Option) (bundle.Manifest, error) {
	if len(s.ReplaceTags) > 0 && s.Key == nil {
		return bundle.Manifest{}, fmt.Errorf("replacing tags (%s) needs a signed disk: a node honours it only in a bundle signed by a key it trusts for bundles; sign it (--sign KEY)",
			strings.Join(s.ReplaceTags, ", "))
	}
	b, err := bundle.Parse(bundleFile)
	if err != nil {
		return bundle.Manifest{}, err
	}
	images, err := bundle.Resolve(ctx, b, opts...)
	if err != nil {
		return bundle.Manifest{}, err
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".bundle-disk-")
	if err != nil {
		return bundle.Manifest{}, err
	}
	defer os.RemoveAll(work)
	layoutDir := filepath.Join(work, "bundle")
	m, err := bundle.WriteLayout(ctx, layoutDir, images, opts...)
	if err != nil {
		return m, err
	}
	if len(s.ReplaceTags) > 0 {
		if err := markReplacing(layoutDir, s.ReplaceTags); err != nil {
			return m, err
		}
	}
	if s.Key != nil {
		index, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
		if err != nil {
			return m, fmt.Errorf("sign the bundle: %w", err)
		}
		if err := os.WriteFile(filepath.Join(layoutDir, layout.BundleIndexSignature), signature.SignFor(signature.PurposeBundle, s.Key, index), 0o644); err != nil {
			return m, fmt.Errorf("sign the bundle: %w", err)
		}
	}
	if err := mkfs(ctx, layoutDir, out+".partial"); err != nil {
		os.Remove(out + ".partial")
		return m, err
	}
	return m, atomicfile.Replace(out+".partial", out)
}

// markReplacing annotates the index.json entries named in names with
// layout.BundleReplacesAnnotation; every name must be one of the layout's.
func markReplacing(dir string, names []string) error {
	path := filepath.Join(dir, "index.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("mark replaced tags: %w", err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("mark replaced tags: parse %s: %w", path, err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var have []string
	for i, e := range idx.Manifests {
		name := e.Annotations[bundle.RefNameAnnotation]
		have = append(have, name)
		if !want[name] {
			continue
		}
		if idx.Manifests[i].Annotations == nil {
			idx.Manifests[i].Annotations = map[string]string{}
		}
		idx.Manifests[i].Annotations[layout.BundleReplacesAnnotation] = "true"
		delete(want, name)
	}
	if len(want) > 0 {
		missing := slices.Sorted(maps.Keys(want))
		return fmt.Errorf("--replace-tags %s: not an image of the bundle; its images are %s", strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	out, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("mark replaced tags: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("mark replaced tags: %w", err)
	}
	return nil
}

// mkfs makes an ext4 image holding dir's content at its root.
func mkfs(ctx context.Context, dir, img string) error {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		return err
	}
	mib := (size*5/4)>>20 + 32
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	if err := f.Truncate(mib << 20); err != nil {
		f.Close()
		return err
	}
	f.Close()
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", Label, "-d", dir, "-E", "root_owner=0:0", "-O", "^has_journal", img)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 for bundle disk: %w: %s", err, b)
	}
	return nil
}
