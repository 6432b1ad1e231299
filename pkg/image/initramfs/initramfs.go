// Package initramfs writes Terrarium's initramfs: a newc cpio archive (via
// u-root's cpio package) holding the Go /init, the kernel modules it loads
// (decompressed, in dependency order), and busybox as the rescue shell.
// The archive is reproducible: fixed owners, times and record order.
package initramfs

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/u-root/u-root/pkg/cpio"
	"github.com/ulikunitz/xz"
)

// Paths inside the initramfs that /init relies on: the contract's.
const (
	ModulesDir   = layout.InitramfsModulesDir
	ModulesOrder = layout.InitramfsModulesOrder
	Busybox      = layout.InitramfsBusybox
)

// DefaultModules are loaded when the build spec names none: storage
// controllers, USB sticks, the filesystems of slots, STATE and config
// disks, and what opens an encrypted STATE (dm-crypt, AES-XTS — with
// AES-NI where the CPU has it, loaded before the mapping is made so that
// it is the one the mapping uses — and the kernel crypto API cryptsetup
// decrypts keyslots with).
func DefaultModules() []string {
	return []string{
		"virtio_blk", "virtio_scsi", "nvme", "ahci", "sd_mod", "sr_mod",
		"xhci_pci", "ehci_pci", "usb_storage", "uas", "mmc_block", "sdhci_pci",
		"squashfs", "loop", "overlay", "crc32c_generic", "crc32c_intel", "ext4", "vfat", "nls_cp437", "nls_iso8859_1", "nls_ascii", "isofs", "efivarfs",
		"dm_crypt", "xts", "aesni_intel", "algif_skcipher",
	}
}

// Inputs of an initramfs.
type Inputs struct {
	Init       string   // the static /init binary
	Busybox    string   // a static busybox
	ModulesDir string   // the kernel's /usr/lib/modules/<version>
	Modules    []string // module names to load (dependencies are added)
}

// Write writes the gzip-compressed initramfs to w.
func Write(w io.Writer, in Inputs) error {
	idx, err := readModuleIndex(in.ModulesDir)
	if err != nil {
		return err
	}
	order, err := idx.loadOrder(in.Modules)
	if err != nil {
		return err
	}
	recs := []cpio.Record{
		cpio.Directory("bin", 0o755), cpio.Directory("dev", 0o755), cpio.Directory("etc", 0o755),
		cpio.Directory("lib", 0o755), cpio.Directory("lib/modules", 0o755), cpio.Directory("proc", 0o755),
		cpio.Directory("run", 0o755), cpio.Directory("sys", 0o755), cpio.Directory("sysroot", 0o755),
		cpio.Directory("tmp", 0o1777),
		cpio.CharDev("dev/console", 0o600, 5, 1), cpio.CharDev("dev/null", 0o666, 1, 3),
		cpio.Symlink("bin/sh", "busybox"),
	}
	for _, f := range []struct{ path, name string }{{in.Init, "init"}, {in.Busybox, "bin/busybox"}} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		recs = append(recs, cpio.StaticRecord(data, cpio.Info{Name: f.name, Mode: cpio.S_IFREG | 0o755}))
	}
	for _, name := range order {
		data, err := readModule(filepath.Join(in.ModulesDir, idx.paths[name]))
		if err != nil {
			return err
		}
		recs = append(recs, cpio.StaticRecord(data, cpio.Info{Name: "lib/modules/" + name + ".ko", Mode: cpio.S_IFREG | 0o644}))
	}
	recs = append(recs, cpio.StaticFile(strings.TrimPrefix(ModulesOrder, "/"), strings.Join(order, "\n")+"\n", 0o644))
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	cpio.MakeAllReproducible(recs)

	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	rw := cpio.Newc.Writer(gz)
	if err := cpio.WriteRecords(rw, recs); err != nil {
		return fmt.Errorf("initramfs: write cpio: %w", err)
	}
	if err := cpio.WriteTrailer(rw); err != nil {
		return fmt.Errorf("initramfs: write cpio trailer: %w", err)
	}
	return gz.Close()
}

// readModule returns a module's ELF, decompressing .ko.xz so /init can
// hand it to init_module without a decompressor of its own.
func readModule(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("initramfs: read module: %w", err)
	}
	if !strings.HasSuffix(path, ".xz") {
		return data, nil
	}
	r, err := xz.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("initramfs: decompress %s: %w", path, err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("initramfs: decompress %s: %w", path, err)
	}
	return out, nil
}
