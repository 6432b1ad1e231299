package rootfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/slotindex"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/layers"
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
	// v2: the tree is written through an os.Root, replacing links (customize).
	// v3: the bundle's layers unpacked into the slot (layout.SlotLayersDir).
	// v4: 128 KiB squashfs blocks; /etc and /var marked updated.
	// v5: lz4 (squashfs.LZ4), not zstd.
	// v6: the overlay's ModesFile and system users (sysusers.d) applied.
	// v7: the slot's index of its files (layout.SlotIndexFile).
	k := cache.NewKey("slot/v7").String("base", in.Base.Key).
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
		if err := customize(ctx, root, in, rel, epoch); err != nil {
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

// customize turns the extracted base at rootDir into the slot's tree. Every
// write goes through an os.Root of the tree and replaces what was there
// (a file, or a link, never followed): the base's absolute links (such as
// /etc/localtime) point at the build host's files, and a write through
// them would change the host and leave the image unchanged.
func customize(ctx context.Context, rootDir string, in SlotInputs, rel []byte, epoch time.Time) error {
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return err
	}
	defer root.Close()
	// Per-machine identity must not be baked into an image shared by many.
	for _, g := range []string{"etc/ssh/ssh_host_*", "boot/initrd.img*", "initrd.img*", "var/lib/dbus/machine-id"} {
		matches, _ := filepath.Glob(filepath.Join(rootDir, g))
		for _, m := range matches {
			if err := root.Remove(strings.TrimPrefix(m, rootDir+"/")); err != nil {
				return err
			}
		}
	}
	if err := writeFile(root, "etc/machine-id", nil, 0o444); err != nil {
		return err
	}
	if err := moveToVar(root); err != nil {
		return err
	}
	if err := root.MkdirAll(strings.TrimPrefix(layout.StateMount, "/"), 0o755); err != nil {
		return err
	}
	if in.Overlay != "" {
		if err := copyInto(ctx, root, in.Overlay, "."); err != nil {
			return fmt.Errorf("copy overlay %s: %w", in.Overlay, err)
		}
		modes, err := readModes(in.Overlay)
		if err != nil {
			return err
		}
		if err := applyModes(root, in.Overlay, modes); err != nil {
			return err
		}
		if err := makeUsers(ctx, rootDir, in.Overlay, epoch); err != nil {
			return err
		}
	}
	if err := installFile(root, in.Firstboot, "usr/bin/firstboot", 0o755); err != nil {
		return err
	}
	if err := writeFile(root, strings.TrimPrefix(layout.ReleaseFile, "/"), rel, 0o644); err != nil {
		return err
	}
	if len(in.UpgradeKeys) > 0 {
		keys := []byte(strings.Join(in.UpgradeKeys, "\n") + "\n")
		if err := writeFile(root, strings.TrimPrefix(layout.UpgradeKeysFile, "/"), keys, 0o644); err != nil {
			return err
		}
	}
	if in.BundleDir != "" {
		if err := copyInto(ctx, root, in.BundleDir, strings.TrimPrefix(BundlePath, "/")); err != nil {
			return fmt.Errorf("copy the bundle %s: %w", in.BundleDir, err)
		}
		if err := unpackLayers(ctx, rootDir, in.BundleDir); err != nil {
			return err
		}
	}
	for _, p := range in.Programs {
		if err := installFile(root, p.Src, p.Dest, 0o755); err != nil {
			return fmt.Errorf("install %s: %w", p.Dest, err)
		}
	}
	// The base's caches (ld.so.cache, the journal's catalog, udev's hwdb)
	// were made when its packages were installed: /etc and /var are as
	// current as /usr, whose time is the epoch's. Said in systemd's own
	// stamp, its ConditionNeedsUpdate= units (ldconfig,
	// systemd-update-done, ...) skip a node's first boot instead of
	// redoing that work on it.
	stamp := []byte(fmt.Sprintf("# Written by imagebuild: the image's caches are current (systemd-update-done(8)).\nTIMESTAMP_NSEC=%d\n", epoch.UnixNano()))
	for _, dir := range []string{"etc", "var"} {
		if err := writeFile(root, dir+"/.updated", stamp, 0o644); err != nil {
			return err
		}
	}
	if len(in.Enable) > 0 {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{rootDir, "systemctl", "enable"}, in.Enable...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl enable %s: %w: %s", strings.Join(in.Enable, " "), err, b)
		}
	}
	// Last: the index lists the tree as the squashfs will hold it.
	ix, err := slotindex.Build(ctx, rootDir, layout.SlotIndexFile)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := ix.WriteTo(&buf); err != nil {
		return err
	}
	return writeFile(root, strings.TrimPrefix(layout.SlotIndexFile, "/"), buf.Bytes(), 0o644)
}

// unpackLayers unpacks the bundle's layers into the slot, for the node's
// snapshotter (pkg/image/layers, pkg/node/images/snapshotter). They are written
// by path, under the bundle's directory, which the copy through the os.Root
// has just made: no link leads out of the tree there.
func unpackLayers(ctx context.Context, rootDir, bundleDir string) error {
	parent := filepath.Join(rootDir, filepath.Dir(strings.TrimPrefix(layout.SlotLayersDir, "/")))
	resolved, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return err
	}
	if abs, err := filepath.EvalSymlinks(rootDir); err != nil || !strings.HasPrefix(resolved, abs+string(filepath.Separator)) {
		return fmt.Errorf("unpack the bundle's layers: %s leads out of the slot's tree", parent)
	}
	if _, err := layers.Unpack(ctx, bundleDir, filepath.Join(rootDir, strings.TrimPrefix(layout.SlotLayersDir, "/")), nil); err != nil {
		return fmt.Errorf("unpack the bundle's layers into the slot: %w", err)
	}
	return nil
}

// moveToVar turns the directories of movedToVar into links into /var,
// their content moved there.
func moveToVar(root *os.Root) error {
	for from, to := range movedToVar {
		if err := root.MkdirAll(to, 0o755); err != nil {
			return err
		}
		dir, err := root.Open(from)
		var entries []os.DirEntry
		if err == nil {
			entries, err = dir.ReadDir(-1)
			_ = dir.Close() // read only
		}
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range entries {
			if err := root.Rename(path.Join(from, e.Name()), path.Join(to, e.Name())); err != nil {
				return err
			}
		}
		if err := root.RemoveAll(from); err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(from), to)
		if err := root.Symlink(rel, from); err != nil {
			return err
		}
	}
	return nil
}

// copyInto copies the tree at src into root at dst (a path in the tree):
// directories are merged, files and links replace what is there, modes
// are kept, owners are root's. An overlay's ModesFile (dst ".") is not
// copied. A path of src that movedToVar made a link
// into /var is refused by name: /var is the node's writable state, which
// hides what the image holds there. A src that is a symbolic link is the
// tree it points to.
func copyInto(ctx context.Context, root *os.Root, src, dst string) error {
	src, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == ModesFile && dst == "." {
			return nil // says what the overlay's modes are; not a file of the image
		}
		if _, ok := movedToVar[filepath.ToSlash(rel)]; ok && dst == "." {
			return fmt.Errorf("%s: /%s is a link into /var on the appliance (its writable state, which hides the image's copy); put these files under /usr or /etc", p, rel)
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			// A directory the tree has keeps its mode; a new one is
			// 0755, whatever the checkout's umask made of the source.
			if _, err := root.Lstat(target); err == nil {
				return nil
			}
			if err := root.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return root.Chmod(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := removeFile(root, target); err != nil {
				return err
			}
			return root.Symlink(link, target)
		case d.Type().IsRegular():
			// What git records: executable or not.
			mode := os.FileMode(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			return installFile(root, p, target, mode)
		default:
			return fmt.Errorf("%s: %v files cannot go into an image", p, d.Type())
		}
	})
}

// installFile copies the host file src to name in root, with mode.
func installFile(root *os.Root, src, name string, mode os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return copyFile(root, name, f, mode)
}

// writeFile writes data to name in root as a new file of mode, replacing
// a file or link that was there (never writing through it).
func writeFile(root *os.Root, name string, data []byte, mode os.FileMode) error {
	return copyFile(root, name, bytes.NewReader(data), mode)
}

// copyFile writes what r reads to name in root as a new file of mode,
// replacing a file or link that was there (never writing through it).
func copyFile(root *os.Root, name string, r io.Reader, mode os.FileMode) error {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	if err := removeFile(root, name); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chmod(name, mode) // the umask took its share at creation
}

// removeFile removes a file or link at name in root, if there is one; a
// directory there is an error.
func removeFile(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory in the image", name)
	}
	return root.Remove(name)
}
