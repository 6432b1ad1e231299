// Package esp writes the EFI system partition: systemd-boot as the
// removable-media boot loader, a kernel and initramfs per slot (or, on a
// Secure Boot image, one signed unified kernel image per slot and the
// site's enrollment files), and Boot Loader Spec entries with boot
// counting. mkfs.fat --invariant and mcopy
// make the FAT filesystems, with every time taken from the build's epoch,
// so the same inputs give the same bytes.
package esp

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Entry is one slot's boot entry.
type Entry struct {
	Slot    layout.Slot
	Title   string
	Version string
	Kernel  string // host path of the kernel
	Initrd  string // host path of the initramfs
	Cmdline []string
	// UKI is the host path of the slot's signed unified kernel image, in
	// place of Kernel, Initrd and Cmdline: its command line is inside it.
	UKI string
	// Tries starts the entry's boot counter; 0 writes a blessed entry.
	Tries int
	// SortKey orders entries: systemd-boot boots the first good entry, so
	// the preferred slot gets the smaller key.
	SortKey string
	// ID names the entry file (ID.conf) instead of the slot, for a second
	// entry of the same slot (the ISO's installer entry); such an entry is
	// never counted.
	ID string
}

// Contents of an ESP.
type Contents struct {
	SystemdBoot    string // host path of systemd-bootx64.efi
	TimeoutSeconds int
	Entries        []Entry
	// EnrollKeys are a Secure Boot image's enrollment files, name → host
	// path (PK.auth, KEK.auth, db.auth), written to
	// layout.ESPEnrollKeysDir.
	EnrollKeys map[string]string
	// SecureBootEnroll is loader.conf's secure-boot-enroll (if-safe,
	// manual, force, off); written only with EnrollKeys.
	SecureBootEnroll string
	// GrubConfig and GrubEnv, on an image that also boots under BIOS,
	// are GRUB's configuration and environment block (package
	// biosboot), written to layout.ESPGrubConfig and layout.ESPGrubEnv.
	GrubConfig string
	GrubEnv    []byte
}

// Files returns the ESP's files: path on the ESP -> content source. A
// source is either a host path (prefixed "file:") or literal content.
func (c Contents) Files() map[string]string {
	files := map[string]string{
		layout.ESPBootloader:  "file:" + c.SystemdBoot,
		layout.ESPSystemdBoot: "file:" + c.SystemdBoot,
		layout.ESPLoaderConf:  c.loaderConf(),
	}
	for _, e := range c.Entries {
		name := e.Slot.EntryFile(e.Tries)
		if e.ID != "" {
			name = e.ID + ".conf"
		}
		files[layout.ESPEntriesDir+"/"+name] = e.conf()
		if e.UKI != "" {
			files[e.Slot.UKIPath()] = "file:" + e.UKI
			continue
		}
		files[e.Slot.KernelPath()] = "file:" + e.Kernel
		files[e.Slot.InitrdPath()] = "file:" + e.Initrd
	}
	for name, host := range c.EnrollKeys {
		files[layout.ESPEnrollKeysDir+"/"+name] = "file:" + host
	}
	if c.GrubConfig != "" {
		files[layout.ESPGrubConfig] = c.GrubConfig
		files[layout.ESPGrubEnv] = string(c.GrubEnv)
	}
	return files
}

func (c Contents) loaderConf() string {
	// "terrarium-*" matches every slot; systemd-boot sorts entries whose
	// tries are exhausted last, so the first match is the preferred slot
	// while it is good and the other slot once it is bad.
	conf := fmt.Sprintf("# Written by Terrarium imagebuild.\ntimeout %d\ndefault %s*\neditor no\nauto-entries no\nauto-firmware no\nconsole-mode keep\n",
		c.TimeoutSeconds, layout.ESPEntryTokenPrefix)
	if len(c.EnrollKeys) > 0 && c.SecureBootEnroll != "" {
		conf += "secure-boot-enroll " + c.SecureBootEnroll + "\n"
	}
	return conf
}

func (e Entry) conf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "title %s\n", e.Title)
	fmt.Fprintf(&b, "version %s\n", e.Version)
	fmt.Fprintf(&b, "sort-key %s\n", e.SortKey)
	if e.UKI != "" {
		// systemd-boot 257 has no "uki" key; "efi" starts the UKI
		// through the firmware's LoadImage, which checks its signature.
		fmt.Fprintf(&b, "efi /%s\n", e.Slot.UKIPath())
		return b.String()
	}
	fmt.Fprintf(&b, "linux /%s\n", e.Slot.KernelPath())
	fmt.Fprintf(&b, "initrd /%s\n", e.Slot.InitrdPath())
	opts := e.Slot.Cmdline(e.Cmdline)
	fmt.Fprintf(&b, "options %s\n", strings.Join(opts, " "))
	return b.String()
}

// Write creates a FAT32 image of size bytes at imagePath holding c: the
// disk image's EFI system partition.
func Write(ctx context.Context, imagePath string, size int64, c Contents, epoch time.Time) error {
	stage, total, err := stageFiles(imagePath, c, epoch)
	if err != nil {
		return fmt.Errorf("write ESP %s: %w", imagePath, err)
	}
	defer os.RemoveAll(stage)
	// FAT32's two tables take 4 bytes a 512-byte cluster each (mkfs.fat's
	// cluster size up to 260 MB); a MiB more for directories and slack.
	if overhead := 2*4*(size/512) + layout.MiB; total+overhead > size {
		return fmt.Errorf("write ESP %s: its files need %d MiB, and with the filesystem's own tables more than its %d MiB; make it larger (disk.espSizeMiB)",
			imagePath, (total+layout.MiB-1)>>20, size>>20)
	}
	if err := makeFAT(ctx, imagePath, size, []string{"-F", "32"}, stage, epoch); err != nil {
		return fmt.Errorf("write ESP %s: %w", imagePath, err)
	}
	return nil
}

// MaxElToritoSize is the largest El Torito boot image firmware reads
// whole: the boot catalog counts it in 512-byte sectors, 16 bits wide. A
// FAT32 filesystem needs more (65,525 clusters), so WriteSmall makes FAT16
// (FAT12 when tiny).
const MaxElToritoSize = 65535 * 512

// WriteSmall writes c as a FAT16 image just big enough for its files (with
// 2 MiB to spare), at most MaxElToritoSize: the ISO's El Torito EFI boot
// image, which is also its EFI partition on a USB stick.
func WriteSmall(ctx context.Context, imagePath string, c Contents, epoch time.Time) error {
	stage, total, err := stageFiles(imagePath, c, epoch)
	if err != nil {
		return fmt.Errorf("write the ISO's EFI image %s: %w", imagePath, err)
	}
	defer os.RemoveAll(stage)
	size := (total + 2*layout.MiB + layout.MiB - 1) / layout.MiB * layout.MiB
	if size > MaxElToritoSize {
		size = MaxElToritoSize / 1024 * 1024
		if total+layout.MiB > size {
			return fmt.Errorf("the ISO's EFI image needs %d MiB (kernel, initramfs, systemd-boot), more than the %d KiB El Torito allows", total>>20, MaxElToritoSize>>10)
		}
	}
	if err := makeFAT(ctx, imagePath, size, nil, stage, epoch); err != nil {
		return fmt.Errorf("write the ISO's EFI image %s: %w", imagePath, err)
	}
	return nil
}

// stageFiles copies c's files into a new directory beside imagePath, each
// with the time epoch, and returns it with the files' total size.
func stageFiles(imagePath string, c Contents, epoch time.Time) (string, int64, error) {
	stage, err := os.MkdirTemp(filepath.Dir(imagePath), ".esp-")
	if err != nil {
		return "", 0, err
	}
	var total int64
	files := c.Files()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		src := files[name]
		dst := filepath.Join(stage, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			_ = os.RemoveAll(stage)
			return "", 0, err
		}
		n, err := int64(len(src)), error(nil)
		if host, ok := strings.CutPrefix(src, "file:"); ok {
			n, err = copyFile(host, dst)
		} else {
			err = os.WriteFile(dst, []byte(src), 0o644)
		}
		if err != nil {
			_ = os.RemoveAll(stage)
			return "", 0, fmt.Errorf("%s: %w", name, err)
		}
		total += n
	}
	err = filepath.WalkDir(stage, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, epoch, epoch)
	})
	if err != nil {
		_ = os.RemoveAll(stage)
		return "", 0, err
	}
	return stage, total, nil
}

// makeFAT formats a FAT filesystem of size bytes at imagePath (mkfs.fat
// --invariant, with fatArgs) and copies the staged tree into it (mcopy -m:
// the files keep their staged times; the directories mcopy creates get
// SOURCE_DATE_EPOCH, set for it alone), so that the same files at the same
// epoch give the same bytes.
func makeFAT(ctx context.Context, imagePath string, size int64, fatArgs []string, stage string, epoch time.Time) error {
	if err := os.Remove(imagePath); err != nil && !os.IsNotExist(err) {
		return err
	}
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	args := append(append([]string{"-C", "--invariant"}, fatArgs...), "-n", layout.LabelESPFS, imagePath, strconv.FormatInt(size>>10, 10))
	mkfs := exec.CommandContext(ctx, "mkfs.fat", args...)
	mkfs.Env = env
	if b, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.fat (run `make deps`): %w: %s", err, strings.TrimSpace(string(b)))
	}
	entries, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	cp := []string{"-s", "-m", "-i", imagePath}
	for _, e := range entries {
		cp = append(cp, filepath.Join(stage, e.Name()))
	}
	mcopy := exec.CommandContext(ctx, "mcopy", append(cp, "::")...)
	mcopy.Env = env
	if b, err := mcopy.CombinedOutput(); err != nil {
		_ = os.Remove(imagePath)
		if strings.Contains(string(b), "Disk full") {
			return fmt.Errorf("the files do not fit in %d MiB once the filesystem's own tables are counted; make it larger (disk.espSizeMiB)", size>>20)
		}
		return fmt.Errorf("mcopy (run `make deps`): %w: %s", err, strings.TrimSpace(string(b)))
	}
	return nil
}

// copyFile copies src, which must not be empty (a kernel, an initramfs, a
// boot loader), to dst and returns its size.
func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err != nil {
		_ = out.Close()
		return 0, err
	}
	if n == 0 {
		_ = out.Close()
		return 0, fmt.Errorf("%s is empty", src)
	}
	return n, out.Close()
}
