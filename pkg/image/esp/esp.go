// Package esp writes the EFI system partition: systemd-boot as the
// removable-media boot loader, a kernel and initramfs per slot, and Boot
// Loader Spec entries with boot counting. The FAT32 filesystem is made with
// go-diskfs in reproducible mode (fixed volume id; times from
// SOURCE_DATE_EPOCH).
package esp

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
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
		files[e.Slot.KernelPath()] = "file:" + e.Kernel
		files[e.Slot.InitrdPath()] = "file:" + e.Initrd
	}
	return files
}

func (c Contents) loaderConf() string {
	// "terrarium-*" matches every slot; systemd-boot sorts entries whose
	// tries are exhausted last, so the first match is the preferred slot
	// while it is good and the other slot once it is bad.
	return fmt.Sprintf("# Written by Terrarium imagebuild.\ntimeout %d\ndefault %s*\neditor no\nauto-entries no\nauto-firmware no\nconsole-mode keep\n",
		c.TimeoutSeconds, layout.ESPEntryTokenPrefix)
}

func (e Entry) conf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "title %s\n", e.Title)
	fmt.Fprintf(&b, "version %s\n", e.Version)
	fmt.Fprintf(&b, "sort-key %s\n", e.SortKey)
	fmt.Fprintf(&b, "linux /%s\n", e.Slot.KernelPath())
	fmt.Fprintf(&b, "initrd /%s\n", e.Slot.InitrdPath())
	opts := append(append([]string(nil), e.Cmdline...), layout.CmdlineSlot+"="+string(e.Slot))
	fmt.Fprintf(&b, "options %s\n", strings.Join(opts, " "))
	return b.String()
}

// Write creates a FAT32 image of size bytes at imagePath holding c.
func Write(imagePath string, size int64, c Contents) error {
	if err := os.Remove(imagePath); err != nil && !os.IsNotExist(err) {
		return err
	}
	d, err := diskfs.Create(imagePath, size, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("create ESP image %s: %w", imagePath, err)
	}
	if err := writeFS(d, c); err != nil {
		d.Close()
		return fmt.Errorf("write ESP %s: %w", imagePath, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("write ESP %s: %w", imagePath, err)
	}
	return fixFAT32(imagePath)
}

func writeFS(d *disk.Disk, c Contents) error {
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat32, VolumeLabel: layout.LabelESPFS, Reproducible: true})
	if err != nil {
		return fmt.Errorf("format: %w", err)
	}
	files := c.Files()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeFile(fs, n, files[n]); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

func writeFile(fs filesystem.FileSystem, name, source string) error {
	if err := fs.Mkdir("/" + path.Dir(name)); err != nil {
		return err
	}
	f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR|os.O_TRUNC)
	if err != nil {
		return err
	}
	var r io.Reader = strings.NewReader(source)
	if host, ok := strings.CutPrefix(source, "file:"); ok {
		hf, err := os.Open(host)
		if err != nil {
			return err
		}
		defer hf.Close()
		if fi, err := hf.Stat(); err != nil || fi.Size() == 0 {
			return fmt.Errorf("%s is empty or unreadable", host)
		}
		r = hf
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MaxElToritoSize is the largest El Torito boot image firmware reads
// whole: the boot catalog counts it in 512-byte sectors, 16 bits wide. A
// FAT32 filesystem needs more (65,525 clusters), so WriteSmall makes FAT16
// (FAT12 when tiny).
const MaxElToritoSize = 65535 * 512

// WriteSmall writes c as a FAT16 image just big enough for its files (with
// 2 MiB to spare), at most MaxElToritoSize: the ISO's El Torito EFI boot
// image, which is also its EFI partition on a USB stick. go-diskfs writes
// only FAT32, so mkfs.fat (--invariant) and mcopy (-m, with the files'
// times set to epoch and SOURCE_DATE_EPOCH for the directories) make it,
// reproducibly.
func WriteSmall(ctx context.Context, imagePath string, c Contents, epoch time.Time) error {
	stage, err := os.MkdirTemp(filepath.Dir(imagePath), ".esp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	var total int64
	for name, src := range c.Files() {
		dst := filepath.Join(stage, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if host, ok := strings.CutPrefix(src, "file:"); ok {
			err = copyFile(host, dst)
		} else {
			err = os.WriteFile(dst, []byte(src), 0o644)
		}
		if err != nil {
			return fmt.Errorf("stage %s: %w", name, err)
		}
		fi, err := os.Stat(dst)
		if err != nil {
			return err
		}
		total += fi.Size()
	}
	err = filepath.WalkDir(stage, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, epoch, epoch)
	})
	if err != nil {
		return err
	}
	size := (total + 2*layout.MiB + layout.MiB - 1) / layout.MiB * layout.MiB
	if size > MaxElToritoSize {
		size = MaxElToritoSize / 1024 * 1024
		if total+layout.MiB > size {
			return fmt.Errorf("the ISO's EFI image needs %d MiB (kernel, initramfs, systemd-boot), more than the %d KiB El Torito allows", total>>20, MaxElToritoSize>>10)
		}
	}
	os.Remove(imagePath)
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch.Unix(), 10))
	mkfs := exec.CommandContext(ctx, "mkfs.fat", "-C", "--invariant", "-n", layout.LabelESPFS, imagePath, strconv.FormatInt(size>>10, 10))
	mkfs.Env = env
	if b, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.fat (run `make deps`): %w: %s", err, strings.TrimSpace(string(b)))
	}
	entries, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	args := []string{"-s", "-m", "-i", imagePath}
	for _, e := range entries {
		args = append(args, filepath.Join(stage, e.Name()))
	}
	mcopy := exec.CommandContext(ctx, "mcopy", append(args, "::")...)
	mcopy.Env = env
	if b, err := mcopy.CombinedOutput(); err != nil {
		os.Remove(imagePath)
		return fmt.Errorf("mcopy (run `make deps`): %w: %s", err, strings.TrimSpace(string(b)))
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || fi.Size() == 0 {
		return fmt.Errorf("%s is empty or unreadable", src)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
