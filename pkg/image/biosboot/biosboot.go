// Package biosboot makes an image boot under BIOS as well as UEFI, with
// GRUB (i386-pc) from the base's pinned grub-pc-bin: the MBR's boot code
// loads GRUB's core image from the BIOS boot partition, the core image
// finds the ESP by its label, and the ESP's grub/grub.cfg boots a slot
// from the same Boot Loader Spec entries as systemd-boot does
// (docs/on-disk-contract.md#bios-boot). It does what grub-bios-setup
// does for such a disk, on an image file: the boot code with the core's
// first sector, and the core's list of its other sectors. The hybrid
// ISO boots under BIOS the same way from its own core image (El Torito),
// with a menu of its live and installer entries (LiveMenu).
package biosboot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Modules are built into both core images, so that GRUB loads nothing
// from the disk but its configuration.
var Modules = []string{
	"biosdisk", "part_gpt", "part_msdos", "fat", "iso9660", "search", "search_label",
	"normal", "configfile", "regexp", "test", "loadenv", "linux", "echo", "sleep",
	"reboot", "halt", "serial", "terminal", "loopback",
}

// EarlyConfigDisk is the disk core image's built-in configuration: the
// ESP of the disk GRUB was loaded from (its label, the boot drive's
// partitions tried first), and GRUB's prefix there.
const EarlyConfigDisk = `search --no-floppy --label ` + layout.LabelESPFS + ` --set=root --hint "${root},"
set prefix=($root)/grub
`

// EarlyConfigCD is the ISO's El Torito core image's built-in
// configuration: the ISO 9660 filesystem by its volume ID (the boot
// device tried first), and GRUB's prefix there. The same core image
// boots the ISO from an optical drive (El Torito) and from a USB stick
// (the hybrid MBR's boot code loads it).
const EarlyConfigCD = `search --no-floppy --label ` + layout.ISOVolumeID + ` --set=root --hint "${root}"
set prefix=($root)/` + layout.ISOGrubDir + `
`

// Offsets in GRUB's i386-pc images (include/grub/i386/pc/boot.h,
// util/setup.c).
const (
	sector = 512
	// bootKernelSector is where boot.img keeps the core's first sector
	// (8 bytes), bootDrive its drive (0xff: the one the BIOS booted),
	// bootDriveCheck a jump that two nops replace on a hard disk (for
	// BIOSes that pass a wrong drive number).
	bootKernelSector = 0x5c
	bootDrive        = 0x64
	bootDriveCheck   = 0x66
	// mbrCode is the part of sector 0 that is boot code: the disk
	// signature and the partition table follow it.
	mbrCode = 0x1b8
	// blocklist is the last entry of the list at the end of the core's
	// first sector (diskboot.img): start (8), sectors (2), segment (2).
	blocklist = sector - 12
	// coreSegment is where the core's second sector is loaded.
	coreSegment = 0x820
	// maxCoreSectors is as many sectors as fit between where the core
	// is loaded (0x9000) and 0x78000 (util/setup.c's limit).
	maxCoreSectors = (0x78000 - 0x9000) / sector
)

// Install writes GRUB's boot code into the MBR of the disk image at path
// and its core image at the BIOS boot partition, which starts at start
// and is size bytes. The protective MBR's partition table and signature
// are kept.
func Install(path string, start, size int64, bootImg, coreImg []byte) error {
	if len(bootImg) != sector {
		return fmt.Errorf("GRUB's boot.img is %d bytes, not %d", len(bootImg), sector)
	}
	nsec := (int64(len(coreImg)) + sector - 1) / sector
	if nsec < 2 || nsec*sector > size || nsec > maxCoreSectors {
		return fmt.Errorf("GRUB's core image is %d bytes; it must be over one sector, at most %d KiB (what GRUB loads below 0x78000) and fit the %d-byte BIOS boot partition: build it with fewer modules",
			len(coreImg), maxCoreSectors*sector/1024, size)
	}
	if start%sector != 0 {
		return fmt.Errorf("the BIOS boot partition starts at %d, not on a sector", start)
	}
	core := make([]byte, nsec*sector)
	copy(core, coreImg)
	first := uint64(start / sector)
	// The list's last entry is the only one: the core is contiguous.
	if !bytes.Equal(core[blocklist-12:blocklist], make([]byte, 12)) {
		return fmt.Errorf("GRUB's core image has a block list already: not a fresh grub-mkimage image")
	}
	binary.LittleEndian.PutUint64(core[blocklist:], first+1)
	binary.LittleEndian.PutUint16(core[blocklist+8:], uint16(nsec-1))
	binary.LittleEndian.PutUint16(core[blocklist+10:], coreSegment)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mbr := make([]byte, sector)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return fmt.Errorf("read the MBR of %s: %w", path, err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xaa || mbr[0x1be+4] != 0xee {
		return fmt.Errorf("%s has no protective MBR: write its GPT first", path)
	}
	copy(mbr[:mbrCode], bootImg[:mbrCode])
	binary.LittleEndian.PutUint64(mbr[bootKernelSector:], first)
	mbr[bootDrive] = 0xff
	mbr[bootDriveCheck], mbr[bootDriveCheck+1] = 0x90, 0x90
	if _, err := f.WriteAt(core, start); err != nil {
		return fmt.Errorf("write GRUB's core image to %s: %w", path, err)
	}
	if _, err := f.WriteAt(mbr, 0); err != nil {
		return fmt.Errorf("write GRUB's boot code to %s: %w", path, err)
	}
	return f.Sync()
}
