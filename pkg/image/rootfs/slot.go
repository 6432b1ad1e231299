package rootfs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/squashfs"
)

// SlotInputs is everything that goes into a slot image.
type SlotInputs struct {
	Base      *Base
	Overlay   string // directory copied over the rootfs; may be empty
	Firstboot string // the firstboot binary
	Release   release.Release
	// Enable lists systemd units enabled in the image.
	Enable []string
	// BundleDir is the OCI layout of the slot's images (optional) and
	// BundleKey its content key.
	BundleDir, BundleKey string
	// Programs are built programs installed into the slot.
	Programs []Program
	// UpgradeKeys are the public keys the slot trusts for upgrade files
	// (layout.UpgradeKeysFile), one a line; none writes no file.
	UpgradeKeys []string
}

// Program is a file installed into the slot.
type Program struct {
	// Src is the file; Dest its path in the slot, relative to the root.
	Src, Dest string
	// Key identifies Src's content (its build's cache key).
	Key string
}

// BundlePath is where the slot carries its OCI layout.
const BundlePath = layout.BundleDir

// SlotImage is the file name of the squashfs in a slot cache entry.
const SlotImage = "slot.squashfs"

// movedToVar are directories that must be writable on an appliance whose
// root is read-only: they become symlinks into /var (on TERRA-STATE).
var movedToVar = map[string]string{
	"home":      "var/home",
	"root":      "var/roothome",
	"srv":       "var/srv",
	"opt":       "var/opt",
	"usr/local": "var/usrlocal",
}

// BuildSlot returns the slot squashfs for in, building it only when the
// cache has no entry for these exact inputs.
func BuildSlot(ctx context.Context, c *cache.Cache, in SlotInputs, epoch time.Time, log *slog.Logger) (string, bool, error) {
	rel, err := in.Release.Marshal()
	if err != nil {
		return "", false, err
	}
	k := cache.NewKey("slot/v1").String("base", in.Base.Key).
		File("firstboot", in.Firstboot).String("release", string(rel)).
		Strings("enable", in.Enable).String("epoch", epoch.Format(time.RFC3339)).
		String("bundle", in.BundleKey).Strings("upgrade keys", in.UpgradeKeys)
	for _, p := range in.Programs {
		k.String("program "+p.Dest, p.Key)
	}
	if in.Overlay != "" {
		k.Tree("overlay", in.Overlay)
	}
	key, err := k.Sum()
	if err != nil {
		return "", false, err
	}
	dir, cached, err := c.Fill(ctx, "slot", key, func(ctx context.Context, dir string) error {
		root := filepath.Join(dir, "root")
		defer os.RemoveAll(root)
		if err := extractTar(ctx, filepath.Join(in.Base.Dir, BaseTar), root); err != nil {
			return err
		}
		if err := customize(ctx, root, in, rel); err != nil {
			return fmt.Errorf("customize slot root: %w", err)
		}
		log.Info("mksquashfs", "root", root)
		return squashfs.Make(ctx, root, filepath.Join(dir, SlotImage), epoch)
	})
	if err != nil {
		return "", false, err
	}
	return filepath.Join(dir, SlotImage), cached, nil
}

func extractTar(ctx context.Context, tarPath, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", tarPath, "-C", root)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("extract %s: %w: %s", tarPath, err, b)
	}
	return nil
}

func customize(ctx context.Context, root string, in SlotInputs, rel []byte) error {
	// Per-machine identity must not be baked into an image shared by many.
	for _, g := range []string{"etc/ssh/ssh_host_*", "boot/initrd.img*", "initrd.img*", "var/lib/dbus/machine-id"} {
		matches, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/machine-id"), nil, 0o444); err != nil {
		return err
	}
	if err := moveToVar(root); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, strings.TrimPrefix(layout.StateMount, "/")), 0o755); err != nil {
		return err
	}
	if in.Overlay != "" {
		if err := copyTree(ctx, in.Overlay, root); err != nil {
			return err
		}
	}
	if err := installFile(in.Firstboot, filepath.Join(root, "usr/bin/firstboot"), 0o755); err != nil {
		return err
	}
	relPath := filepath.Join(root, strings.TrimPrefix(layout.ReleaseFile, "/"))
	if err := os.MkdirAll(filepath.Dir(relPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(relPath, rel, 0o644); err != nil {
		return err
	}
	if len(in.UpgradeKeys) > 0 {
		p := filepath.Join(root, strings.TrimPrefix(layout.UpgradeKeysFile, "/"))
		if err := os.WriteFile(p, []byte(strings.Join(in.UpgradeKeys, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	if in.BundleDir != "" {
		dst := filepath.Join(root, BundlePath)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyTree(ctx, in.BundleDir, dst); err != nil {
			return err
		}
	}
	for _, p := range in.Programs {
		dst := filepath.Join(root, p.Dest)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := installFile(p.Src, dst, 0o755); err != nil {
			return fmt.Errorf("install %s: %w", p.Dest, err)
		}
	}
	if len(in.Enable) > 0 {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{root, "systemctl", "enable"}, in.Enable...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl enable %s: %w: %s", strings.Join(in.Enable, " "), err, b)
		}
	}
	return nil
}

func moveToVar(root string) error {
	for from, to := range movedToVar {
		src, dst := filepath.Join(root, from), filepath.Join(root, to)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range entries {
			if err := os.Rename(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		if err := os.RemoveAll(src); err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(src), dst)
		if err := os.Symlink(rel, src); err != nil {
			return err
		}
	}
	return nil
}

func copyTree(ctx context.Context, src, dst string) error {
	cmd := exec.CommandContext(ctx, "cp", "-a", "--no-preserve=ownership", src+"/.", dst+"/")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("copy overlay %s: %w: %s", src, err, b)
	}
	return nil
}

func installFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}
