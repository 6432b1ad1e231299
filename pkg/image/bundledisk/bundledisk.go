// Package bundledisk writes side-load disks: a FAT32 filesystem labelled
// TERRA-BUNDL (TERRA-BUNDLE cut to FAT's 11 characters) holding one OCI
// layout, which a node's registry verifies and adds to its cache when the
// disk is attached (at boot or later). FAT because a node mounts only FAT,
// exFAT or ISO 9660 from a disk a person attaches (pkg/node/config/media).
package bundledisk

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
)

// Label is the filesystem label the registry looks for, as FAT holds it.
const Label = layout.LabelBundleFAT

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
	// Generation is the bundle's generation, signed beside each replaced
	// tag (layout.BundleGenerationAnnotation); ReplaceTags need it. A node
	// records the highest generation that set each tag and refuses a
	// replacing bundle at or below it, so an older bundle played again
	// cannot move a tag back: number a tag's bundles upwards.
	Generation uint64
}

// check refuses a Signing a node would not honour.
func (s Signing) check() error {
	switch {
	case len(s.ReplaceTags) > 0 && s.Key == nil:
		return fmt.Errorf("replacing tags (%s) needs a signed disk: a node honours it only in a bundle signed by a key it trusts for bundles; sign it (--sign KEY)",
			strings.Join(s.ReplaceTags, ", "))
	case len(s.ReplaceTags) > 0 && s.Generation == 0:
		return fmt.Errorf("replacing tags (%s) needs the bundle's generation (--generation N): a node records the highest generation that moved each tag "+
			"and refuses a bundle at or below it, so an older bundle cannot be played again to move a tag back; "+
			"give a number above that of every bundle signed before for these tags (1 for the first)", strings.Join(s.ReplaceTags, ", "))
	case len(s.ReplaceTags) == 0 && s.Generation != 0:
		return fmt.Errorf("--generation %d is the generation of the tags a bundle replaces, and it replaces none: name them with --replace-tags", s.Generation)
	}
	return nil
}

// Write resolves the bundle file's images and writes the disk image to
// out, signed as s says. Nothing is left at out when it fails.
func Write(ctx context.Context, bundleFile, out string, s Signing, opts ...bundle.Option) (bundle.Manifest, error) {
	if err := s.check(); err != nil {
		return bundle.Manifest{}, err
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
		if err := markReplacing(layoutDir, s.ReplaceTags, s.Generation); err != nil {
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
		_ = os.Remove(out + ".partial")
		return m, err
	}
	return m, atomicfile.Replace(out+".partial", out)
}

// markReplacing annotates the index.json entries named in names with
// layout.BundleReplacesAnnotation and the generation
// (layout.BundleGenerationAnnotation); every name must be one of the
// layout's.
func markReplacing(dir string, names []string, generation uint64) error {
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
		idx.Manifests[i].Annotations[layout.BundleGenerationAnnotation] = strconv.FormatUint(generation, 10)
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

// maxFATFile is the largest file FAT32 holds.
const maxFATFile = 1<<32 - 1

// clusterSlack bounds what a file or directory takes on FAT32 beyond its
// size: up to one cluster (mkfs.fat makes them 32 KiB at most).
const clusterSlack = 32 << 10

// mkfs makes a FAT32 image labelled Label holding dir's content at its
// root (mkfs.fat, mcopy -s).
func mkfs(ctx context.Context, dir, img string) error {
	size := int64(0)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() && info.Size() > maxFATFile {
			rel, _ := filepath.Rel(dir, p)
			return fmt.Errorf("bundle disk: %s is %d bytes, more than a FAT32 file holds (4 GiB)", rel, info.Size())
		}
		size += info.Size() + clusterSlack
		return nil
	})
	if err != nil {
		return err
	}
	// The FATs and reserved sectors (about 0.1% and 16 KiB) with room to
	// spare, and FAT32's least size.
	mib := max(size*21/20>>20+32, 64)
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mkfs := exec.CommandContext(ctx, "mkfs.fat", "-C", "-F", "32", "-n", Label, img, strconv.FormatInt(mib<<10, 10))
	if b, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.fat for bundle disk (run `make deps`): %w: %s", err, strings.TrimSpace(string(b)))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	args := []string{"-s", "-m", "-i", img}
	for _, e := range entries {
		args = append(args, filepath.Join(dir, e.Name()))
	}
	if b, err := exec.CommandContext(ctx, "mcopy", append(args, "::")...).CombinedOutput(); err != nil {
		return fmt.Errorf("mcopy for bundle disk (run `make deps`): %w: %s", err, strings.TrimSpace(string(b)))
	}
	return nil
}
