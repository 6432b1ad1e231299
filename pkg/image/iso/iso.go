// Package iso writes the hybrid ISO: an ISO 9660 filesystem (Rock Ridge)
// holding the slot's squashfs, its release.json and their sha256, booted
// under UEFI through an El Torito EFI boot image that is at the same time
// the image's appended EFI system partition (GPT). An optical drive boots it
// through El Torito; a USB stick written with dd or Etcher boots it through
// the partition. It is made by xorriso and reproducible: every date comes
// from the build's epoch (SOURCE_DATE_EPOCH and -volume_date).
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
	// Xorriso is the xorriso binary ("" finds it on $PATH).
	Xorriso string
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
	for _, f := range []string{in.ESP, in.Slot, in.Head} {
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
	tmp := filepath.Join(work, "out.iso")
	cmd := exec.CommandContext(ctx, bin, Args(tmp, in.ESP, map[string]string{
		layout.ISOSlotFile:    in.Slot,
		layout.ISOHeadFile:    in.Head,
		layout.ISOReleaseFile: rel,
		layout.ISOSumsFile:    sums,
	}, in.Epoch)...)
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
// GPT's disk GUID derive from it.
func Args(out, esp string, files map[string]string, epoch time.Time) []string {
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
		"-e", "--interval:appended_partition_2:all::", "-no-emul-boot",
		"-graft-points",
	}
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
