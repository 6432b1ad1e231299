// Package bundledisk writes side-load disks: an ext4 filesystem labelled
// TERRA-BUNDLE holding one OCI layout, which a node's registry verifies and
// adds to its cache when the disk is attached (at boot or later).
package bundledisk

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
)

// Label is the filesystem label the registry looks for.
const Label = layout.LabelBundle

// Write resolves the bundle file's images and writes the disk image to out;
// with a key (not nil), it signs the layout's index.json
// (layout.BundleIndexSignature beside it), for nodes that take only signed
// bundles. Nothing is left at out when it fails.
func Write(ctx context.Context, bundleFile, out string, key ed25519.PrivateKey, opts ...bundle.Option) (bundle.Manifest, error) {
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
	if key != nil {
		index, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
		if err != nil {
			return m, fmt.Errorf("sign the bundle: %w", err)
		}
		if err := os.WriteFile(filepath.Join(layoutDir, layout.BundleIndexSignature), signature.SignFor(signature.PurposeBundle, key, index), 0o644); err != nil {
			return m, fmt.Errorf("sign the bundle: %w", err)
		}
	}
	if err := mkfs(ctx, layoutDir, out+".partial"); err != nil {
		os.Remove(out + ".partial")
		return m, err
	}
	return m, atomicfile.Replace(out+".partial", out)
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
