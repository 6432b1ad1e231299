// Package rootfs builds the appliance's root filesystem: a Debian base made
// with mmdebstrap (cached by its inputs), the boot artifacts taken out of it
// (kernel, modules, systemd-boot, busybox), and the per-slot tree with
// Terrarium's overlay applied, ready for mksquashfs.
package rootfs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/biosboot"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// Base is a cached Debian base root filesystem and the boot artifacts
// taken from it.
type Base struct {
	// Dir is the cache entry.
	Dir string
	// Key is the entry's content hash.
	Key string
	// Cached reports that no work was done.
	Cached bool
}

// Files inside a Base entry.
const (
	BaseTar           = "rootfs.tar"
	BaseKernel        = "boot/vmlinuz"
	BaseSDBoot        = "boot/systemd-bootx64.efi"
	BaseBusybox       = "boot/busybox"
	BaseModules       = "boot/modules" // the kernel's /usr/lib/modules/<version>
	BaseVersions      = "versions.txt" // "package version" lines, sorted
	BaseKernelRelease = "boot/kernel.release"
	// GRUB for BIOS boot (package biosboot), from grub-pc-bin: its MBR
	// boot code, the hybrid ISO's MBR boot code, and the two core images
	// grub-mkimage made in the base with biosboot's modules and early
	// configurations: the disk's, and the ISO's El Torito image.
	BaseGrubBoot       = "boot/grub/boot.img"
	BaseGrubBootHybrid = "boot/grub/boot_hybrid.img"
	BaseGrubCore       = "boot/grub/core.img"
	BaseGrubCDCore     = "boot/grub/eltorito.img"
)

// dpkg paths left out of the image: documentation and manuals have no
// reader on an appliance.
var dpkgExcludes = []string{
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
}

// BaseKind is the cache kind of rootfs bases.
const BaseKind = "rootfs-base"

// BaseKey is the cache key of the base for os at epoch: its suite,
// packages (in any order) and dpkg options, and either the mirror (the
// packages are resolved there on the day of the build) or, with a lock,
// the exact files.
func BaseKey(o spec.OS, lock *OSLock, epoch time.Time) (string, error) {
	k := cache.NewKey("rootfs-base/v2").
		String("suite", o.Suite).
		Strings("packages", sortedPackages(o)).Strings("dpkgopt", dpkgExcludes).
		Strings("grub-modules", biosboot.Modules).
		String("grub-early-disk", biosboot.EarlyConfigDisk).String("grub-early-cd", biosboot.EarlyConfigCD).
		String("epoch", strconv.FormatInt(epoch.Unix(), 10))
	if lock != nil {
		k.Strings("lock", lock.key())
	} else {
		k.String("mirror", o.Mirror)
	}
	return k.Sum()
}

func sortedPackages(o spec.OS) []string {
	pkgs := append([]string(nil), o.Packages...)
	sort.Strings(pkgs)
	return pkgs
}

// BuildBase returns the base for os (installed from lock's files when
// lock is not nil, which must match os), running mmdebstrap only when the cache
// has no entry for these inputs.
func BuildBase(ctx context.Context, c *cache.Cache, o spec.OS, lock *OSLock, epoch time.Time, log *slog.Logger) (*Base, error) {
	if lock != nil {
		if err := lock.Matches(o); err != nil {
			return nil, err
		}
	}
	key, err := BaseKey(o, lock, epoch)
	if err != nil {
		return nil, err
	}
	dir, cached, err := c.Fill(ctx, BaseKind, key, func(ctx context.Context, dir string) error {
		log.Info("rootfs base", "packages", lockNote(lock))
		if lock == nil {
			return makeBase(ctx, dir, o.Suite, o.Mirror, sortedPackages(o), "", epoch, log)
		}
		repo := filepath.Join(dir, "repo")
		defer os.RemoveAll(repo)
		if err := os.Mkdir(repo, 0o755); err != nil {
			return err
		}
		line, err := localRepo(ctx, c, lock, repo, epoch)
		if err != nil {
			return err
		}
		// The image's apt sources name the archive, not the build's
		// local repository.
		sources := "deb " + lock.Mirror + " " + lock.Suite + " main"
		if err := makeBase(ctx, dir, o.Suite, line, lock.packageNames(), sources, epoch, log); err != nil {
			return err
		}
		versions, err := (&Base{Dir: dir}).Versions()
		if err != nil {
			return err
		}
		return lock.checkInstalled(versions)
	})
	if err != nil {
		return nil, err
	}
	return &Base{Dir: dir, Key: key, Cached: cached}, nil
}

func makeBase(ctx context.Context, dir, suite, mirror string, pkgs []string, sources string, epoch time.Time, log *slog.Logger) error {
	tarPath := filepath.Join(dir, BaseTar)
	args := []string{"--variant=minbase", "--include=" + strings.Join(pkgs, ","), "--format=tar", "--quiet"}
	for _, e := range dpkgExcludes {
		args = append(args, "--dpkgopt="+e)
	}
	// Record package versions for the manifest.
	args = append(args, "--customize-hook=chroot \"$1\" dpkg-query -W -f='${Package} ${Version}\\n' > \""+filepath.Join(dir, BaseVersions)+"\"")
	if sources != "" {
		args = append(args, "--customize-hook=echo '"+sources+"' > \"$1/etc/apt/sources.list\"")
	}
	hooks, err := grubHooks(dir)
	if err != nil {
		return err
	}
	args = append(args, hooks...)
	args = append(args, suite, tarPath, mirror)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	log.Info("mmdebstrap", "suite", suite, "packages", len(pkgs))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mmdebstrap %s: %w\n%s", suite, err, tail(out, 40))
	}
	return extractBootArtifacts(ctx, tarPath, dir)
}

// grubHooks are the mmdebstrap hooks that make GRUB's two core images
// with the base's own grub-mkimage and move them out of the base into
// dir (BaseGrubCore, BaseGrubCDCore), so that the slot does not carry
// them.
func grubHooks(dir string) ([]string, error) {
	grubDir := filepath.Join(dir, filepath.Dir(BaseGrubCore))
	if err := os.MkdirAll(grubDir, 0o755); err != nil {
		return nil, err
	}
	disk, cd := filepath.Join(grubDir, "early-disk.cfg"), filepath.Join(grubDir, "early-cd.cfg")
	if err := os.WriteFile(disk, []byte(biosboot.EarlyConfigDisk), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cd, []byte(biosboot.EarlyConfigCD), 0o644); err != nil {
		return nil, err
	}
	mods := strings.Join(biosboot.Modules, " ")
	mkimage := func(format, prefix, early, out string) string {
		return fmt.Sprintf(`cp %q "$1/tmp/early.cfg" && chroot "$1" grub-mkimage -O %s -p %s -c /tmp/early.cfg -o /tmp/core.img %s && mv "$1/tmp/core.img" %q && rm "$1/tmp/early.cfg"`,
			early, format, prefix, mods, filepath.Join(dir, out))
	}
	return []string{
		"--customize-hook=" + mkimage("i386-pc", "/grub", disk, BaseGrubCore),
		"--customize-hook=" + mkimage("i386-pc-eltorito", "/"+layout.ISOGrubDir, cd, BaseGrubCDCore),
	}, nil
}

// extractBootArtifacts copies what the ESP and initramfs need out of the
// rootfs tarball.
func extractBootArtifacts(ctx context.Context, tarPath, dir string) error {
	tmp, err := os.MkdirTemp(dir, "extract-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "tar", "-xf", tarPath, "-C", tmp, "--wildcards",
		"./boot/vmlinuz-*", "./usr/lib/modules/*", "./usr/lib/systemd/boot/efi/systemd-bootx64.efi", "./usr/bin/busybox",
		"./usr/lib/grub/i386-pc/boot.img", "./usr/lib/grub/i386-pc/boot_hybrid.img")
	if out, err := cmd.CombinedOutput(); err != nil {
		hint := ""
		if strings.Contains(string(out), "Not found in archive") {
			hint = "\nthe base lacks a boot file: os.packages must include linux-image-amd64, systemd-boot-efi, busybox-static and grub-pc-bin"
		}
		return fmt.Errorf("extract boot artifacts from %s: %w\n%s%s", tarPath, err, out, hint)
	}
	kernels, _ := filepath.Glob(filepath.Join(tmp, "boot", "vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(tmp, "usr", "lib", "modules", "*"))
	if len(kernels) != 1 || len(mods) != 1 {
		return fmt.Errorf("rootfs %s: want exactly one kernel and one module tree, found %d and %d (is linux-image-amd64 in os.packages?)", tarPath, len(kernels), len(mods))
	}
	if err := os.MkdirAll(filepath.Join(dir, "boot"), 0o755); err != nil {
		return err
	}
	moves := map[string]string{
		kernels[0]: BaseKernel,
		mods[0]:    BaseModules,
		filepath.Join(tmp, "usr/lib/systemd/boot/efi/systemd-bootx64.efi"): BaseSDBoot,
		filepath.Join(tmp, "usr/bin/busybox"):                              BaseBusybox,
		filepath.Join(tmp, "usr/lib/grub/i386-pc/boot.img"):                BaseGrubBoot,
		filepath.Join(tmp, "usr/lib/grub/i386-pc/boot_hybrid.img"):         BaseGrubBootHybrid,
	}
	for from, to := range moves {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755); err != nil {
			return err
		}
		if err := os.Rename(from, filepath.Join(dir, to)); err != nil {
			return fmt.Errorf("rootfs %s: %w", tarPath, err)
		}
	}
	return os.WriteFile(filepath.Join(dir, BaseKernelRelease), []byte(filepath.Base(mods[0])+"\n"), 0o644)
}

// BaseStubInTar is systemd-stub in a base's tarball, from the same
// systemd-boot-efi as BaseSDBoot: what a Secure Boot build makes its
// unified kernel images of.
const BaseStubInTar = "./usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// ExtractStub copies the base's systemd-stub into dir and returns its
// path. It is read from the tarball when a build asks, not kept beside
// the other boot files, so that bases cached before there were Secure
// Boot images serve them too.
func (b *Base) ExtractStub(ctx context.Context, dir string) (string, error) {
	tarPath := filepath.Join(b.Dir, BaseTar)
	out, err := exec.CommandContext(ctx, "tar", "-xf", tarPath, "-C", dir, BaseStubInTar).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("extract systemd-stub from %s (os.packages must include systemd-boot-efi): %w: %s", tarPath, err, strings.TrimSpace(string(out)))
	}
	return filepath.Join(dir, filepath.FromSlash(BaseStubInTar)), nil
}

// KernelVersion is the version of the base's kernel (its module directory).
func (b *Base) KernelVersion() string {
	data, err := os.ReadFile(filepath.Join(b.Dir, BaseKernelRelease))
	if err == nil {
		return strings.TrimSpace(string(data))
	}
	return ""
}

// Versions returns the installed packages and their versions.
func (b *Base) Versions() (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(b.Dir, BaseVersions))
	if err != nil {
		return nil, fmt.Errorf("read package versions: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if name, ver, ok := strings.Cut(line, " "); ok {
			out[name] = ver
		}
	}
	return out, nil
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
