// Package iso writes the hybrid ISO: an ISO 9660 filesystem (Rock Ridge)
// holding the slot's squashfs, its release.json and their sha256, booted
// under UEFI through an El Torito EFI boot image that is at the same time
// the image's appended EFI system partition (GPT). An optical drive boots it
// through El Torito; a USB stick written with dd or Etcher boots it through
// the partition. Under BIOS, GRUB's El Torito core image boots it from an
// optical drive, and GRUB's hybrid MBR boot code loads that same core
// image from a stick; GRUB's menu on the ISO boots the live entries'
// kernel and initramfs, which the ISO carries beside the EFI image's. It
// is made by xorriso and reproducible: every date comes from the build's
// epoch (SOURCE_DATE_EPOCH and -volume_date).
package iso

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Inputs of an ISO.
type Inputs struct {
	// ESP is a FAT image holding systemd-boot, the live entry, the kernel
	// and the initramfs (esp.Write); it becomes the El Torito EFI image
	// and the appended EFI partition.
	ESP string
	// Slot is the slot's squashfs.
	Slot string
	// Head is the disk image up to its first slot (protective MBR, GPT,
	// EFI partition), which the installer writes.
	Head string
	// Release is the slot's release.json.
	Release []byte
	// Epoch fixes every date in the ISO.
	Epoch time.Time
	// BIOS, when set, boots the ISO under BIOS as well.
	BIOS *BIOS
	// Xorriso is the xorriso binary ("" finds it on $PATH).
	Xorriso string
}

// BIOS is what boots the ISO under BIOS: host paths of GRUB's images, the
// menu and what it boots.
type BIOS struct {
	// Core is GRUB's El Torito core image (grub-mkimage -O
	// i386-pc-eltorito), HybridMBR its boot_hybrid.img, the MBR boot code
	// that loads Core from a stick.
	Core, HybridMBR string
	// Config is GRUB's menu (biosboot.LiveMenu).
	Config []byte
	// Kernel and Initrd are what the menu's entries boot.
	Kernel, Initrd string
}

// Write writes the ISO to out (replacing it once complete).
func Write(ctx context.Context, out string, in Inputs) error {
	bin := in.Xorriso
	if bin == "" {
		bin = "xorriso"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("the iso output needs xorriso (run `make deps`): %w", err)
	}
	inputs := []string{in.ESP, in.Slot, in.Head}
	if in.BIOS != nil {
		inputs = append(inputs, in.BIOS.Core, in.BIOS.HybridMBR, in.BIOS.Kernel, in.BIOS.Initrd)
	}
	for _, f := range inputs {
		if fi, err := os.Stat(f); err != nil {
			return fmt.Errorf("iso input: %w", err)
		} else if fi.Size() == 0 {
			return fmt.Errorf("iso input %s is empty", f)
		}
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".iso-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var list strings.Builder
	for _, f := range []struct{ name, host string }{{layout.ISOHeadFile, in.Head}, {layout.ISOSlotFile, in.Slot}} {
		sum, err := fileSHA256(f.host)
		if err != nil {
			return err
		}
		list.WriteString(SumsLine(f.name, sum))
	}
	rel := filepath.Join(work, "release.json")
	sums := filepath.Join(work, "SHA256SUMS")
	if err := os.WriteFile(rel, in.Release, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(sums, []byte(list.String()), 0o644); err != nil {
		return err
	}
	files := map[string]string{
		layout.ISOSlotFile:    in.Slot,
		layout.ISOHeadFile:    in.Head,
		layout.ISOReleaseFile: rel,
		layout.ISOSumsFile:    sums,
	}
	var hybridMBR string
	if b := in.BIOS; b != nil {
		cfg := filepath.Join(work, "grub.cfg")
		if err := os.WriteFile(cfg, b.Config, 0o644); err != nil {
			return err
		}
		// xorriso patches its boot info table into the copy it writes
		// into the ISO (--grub2-boot-info), never into the input.
		files[layout.ISOGrubCore] = b.Core
		files[layout.ISOGrubConfig] = cfg
		files[layout.ISOGrubKernel] = b.Kernel
		files[layout.ISOGrubInitrd] = b.Initrd
		hybridMBR = b.HybridMBR
	}
	tmp := filepath.Join(work, "out.iso")
	cmd := exec.CommandContext(ctx, bin, Args(tmp, in.ESP, hybridMBR, files, in.Epoch)...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(in.Epoch.Unix(), 10))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("xorriso: %w: %s", err, lastLines(string(b), 10))
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// Args is xorriso's command line: files maps paths in the ISO to host
// paths. Every file's dates are set to epoch; the volume's dates and the
// GPT's disk GUID derive from it. With hybridMBR (GRUB's boot_hybrid.img)
// the ISO boots under BIOS too: files then hold layout.ISOGrubCore, the
// El Torito image BIOS boots first, and the MBR's boot code loads it.
func Args(out, esp, hybridMBR string, files map[string]string, epoch time.Time) []string {
	args := []string{
		"-no_rc", "-report_about", "SORRY", "-abort_on", "FAILURE",
		// Files from the build cache carry the cache's dates: every file
		// and directory gets the epoch instead.
		"-volume_date", "all_file_dates", "=" + strconv.FormatInt(epoch.Unix(), 10),
		"-as", "mkisofs",
		"-o", out,
		"-V", layout.ISOVolumeID,
		"-r", "-iso-level", "3",
		"-append_partition", "2", "0xef", esp,
		"-appended_part_as_gpt",
	}
	if hybridMBR != "" {
		args = append(args,
			"--grub2-mbr", hybridMBR,
			// Some BIOSes boot a stick only with an active partition:
			// a dummy one over the first block, the GPT's 0xee kept.
			"--mbr-force-bootable",
			"-c", "/"+layout.ISOGrubDir+"/boot.cat",
			"-b", "/"+layout.ISOGrubCore, "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table", "--grub2-boot-info",
			"-eltorito-alt-boot",
		)
	}
	args = append(args,
		"-e", "--interval:appended_partition_2:all::", "-no-emul-boot",
		"-graft-points",
	)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		args = append(args, "/"+path.Clean(name)+"="+files[name])
	}
	return args
}

// SumsLine is ISOSumsFile's line for the file name on the ISO, in
// sha256sum's format.
func SumsLine(name, sum string) string {
	return sum + "  " + path.Base(name) + "\n"
}

// Head copies the start of a raw disk image, up to end (the first slot's
// offset), to out, leaving out its trailing zeros (a FAT filesystem keeps
// nothing at its end, and the installer's target needs none of them).
func Head(raw string, end int64, out string) error {
	src, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer src.Close()
	b := make([]byte, end)
	if _, err := src.ReadAt(b, 0); err != nil {
		return fmt.Errorf("read the head of %s: %w", raw, err)
	}
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	const block = 4096
	n = (n + block - 1) / block * block
	return os.WriteFile(out, b[:min(n, len(b))], 0o644)
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
