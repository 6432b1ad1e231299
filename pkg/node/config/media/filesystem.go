package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Filesystem is a filesystem as its own first bytes say (its boot sector,
// superblock or volume descriptor), named as mount(2) takes it. The kernel
// is only ever asked to mount a medium as the Filesystem Probe found.
type Filesystem string

// The filesystems Probe tells apart: those a medium may carry, and those
// it names when it refuses one.
const (
	Unknown  Filesystem = ""
	VFAT     Filesystem = "vfat" // FAT12, FAT16 or FAT32
	ExFAT    Filesystem = "exfat"
	ISO9660  Filesystem = "iso9660"
	Ext2     Filesystem = "ext2"
	Ext3     Filesystem = "ext3"
	Ext4     Filesystem = "ext4"
	Btrfs    Filesystem = "btrfs"
	XFS      Filesystem = "xfs"
	NTFS     Filesystem = "ntfs"
	F2FS     Filesystem = "f2fs"
	Squashfs Filesystem = "squashfs"
	LUKS     Filesystem = "crypto_LUKS"
)

// String is the filesystem's name for people ("ext4", "FAT").
func (f Filesystem) String() string {
	_, name := f.name()
	return name
}

// described is "an ext4 filesystem", or Unknown's name.
func (f Filesystem) described() string {
	article, name := f.name()
	if f == Unknown {
		return name
	}
	return article + " " + name + " filesystem"
}

// name is the filesystem's name for people, with its article.
func (f Filesystem) name() (article, name string) {
	switch f {
	case Unknown:
		return "", "no filesystem the node knows"
	case VFAT:
		return "a", "FAT"
	case ExFAT:
		return "an", "exFAT"
	case ISO9660:
		return "an", "ISO 9660"
	case XFS:
		return "an", "XFS"
	case NTFS:
		return "an", "NTFS"
	case F2FS:
		return "an", "F2FS"
	case LUKS:
		return "a", "LUKS (encrypted)"
	case Ext2, Ext3, Ext4:
		return "an", string(f)
	}
	return "a", string(f)
}

// probeSize is how much of a medium Probe reads: up to btrfs's superblock
// at 64 KiB.
const probeSize = 0x10000 + 0x48

// Probe tells the filesystem on r (a block device) from its first
// probeSize bytes, as blkid would, without the kernel parsing anything.
// FAT's boot sector must be a valid one (a BIOS parameter block whose
// sizes are possible), not a signature alone: the kernel parses what Probe
// says is FAT. An error is a read error; bytes that are no known
// filesystem are Unknown.
func Probe(r io.ReaderAt) (Filesystem, error) {
	b := make([]byte, probeSize)
	n, err := r.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Unknown, fmt.Errorf("read the filesystem's first bytes: %w", err)
	}
	return probeBytes(b[:n]), nil
}

// probeBytes is Probe of a medium's first bytes. Sector 0's filesystems
// come first (a FAT or exFAT boot sector is what the kernel reads of them:
// leftovers of an earlier filesystem further on do not matter).
func probeBytes(b []byte) Filesystem {
	switch {
	case at(b, 3, "EXFAT   ") && exFATBoot(b):
		return ExFAT
	case at(b, 3, "NTFS    "):
		return NTFS
	case fatBoot(b):
		return VFAT
	case at(b, 0, "XFSB"):
		return XFS
	case at(b, 0, "hsqs"):
		return Squashfs
	case at(b, 0, "LUKS\xba\xbe"):
		return LUKS
	case at(b, 0x8001, "CD001\x01"):
		return ISO9660
	case len(b) >= 0x400+extSuperblockSize && at(b, 0x438, "\x53\xef"):
		return extKind(b[0x400:])
	case at(b, 0x400, "\x10\x20\xf5\xf2"):
		return F2FS
	case at(b, 0x10040, "_BHRfS_M"):
		return Btrfs
	}
	return Unknown
}

// at reports whether b holds sig at off.
func at(b []byte, off int, sig string) bool {
	return len(b) >= off+len(sig) && bytes.Equal(b[off:off+len(sig)], []byte(sig))
}

// bootSignature reports whether sector 0 ends as a boot sector does.
func bootSignature(b []byte) bool { return len(b) >= 512 && b[510] == 0x55 && b[511] == 0xaa }

// fatBoot reports whether b starts with a FAT boot sector the kernel's
// vfat takes: a jump, a BIOS parameter block whose sizes are possible
// (Microsoft's FAT specification, "Boot Sector and BPB"), at least one
// cluster of data, and the boot signature.
func fatBoot(b []byte) bool {
	if !bootSignature(b) || !(b[0] == 0xeb && b[2] == 0x90 || b[0] == 0xe9) {
		return false
	}
	le16 := func(off int) uint32 { return uint32(binary.LittleEndian.Uint16(b[off:])) }
	le32 := func(off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
	bytesPerSector, perCluster := le16(11), uint32(b[13])
	reserved, fats, rootEntries := le16(14), uint32(b[16]), le16(17)
	total, fatSize := le16(19), le16(22)
	if total == 0 {
		total = le32(32)
	}
	if fatSize == 0 {
		fatSize = le32(36)
		if rootEntries != 0 { // FAT32 keeps its root directory in clusters
			return false
		}
	}
	media := b[21]
	switch {
	case bytesPerSector < 512 || bytesPerSector > 4096 || bytesPerSector&(bytesPerSector-1) != 0,
		perCluster == 0 || perCluster&(perCluster-1) != 0,
		reserved == 0, fats == 0, total == 0, fatSize == 0,
		media != 0xf0 && media < 0xf8:
		return false
	}
	rootSectors := (rootEntries*32 + bytesPerSector - 1) / bytesPerSector
	meta := uint64(reserved) + uint64(fats)*uint64(fatSize) + uint64(rootSectors)
	return uint64(total) > meta && (uint64(total)-meta)/uint64(perCluster) >= 1
}

// exFATBoot reports whether b starts with an exFAT boot sector the
// kernel's exfat takes (Microsoft's exFAT specification, "Main Boot
// Sector"): the legacy parameter block zeroed, sector and cluster sizes
// within bounds, one or two FATs, the boot signature.
func exFATBoot(b []byte) bool {
	if !bootSignature(b) {
		return false
	}
	for _, c := range b[11:64] {
		if c != 0 {
			return false
		}
	}
	sectorShift, clusterShift, fats := b[108], b[109], b[110]
	return sectorShift >= 9 && sectorShift <= 12 && int(clusterShift) <= 25-int(sectorShift) && (fats == 1 || fats == 2)
}

// extSuperblockSize is as much of ext's superblock as extKind reads.
const extSuperblockSize = 0x64

// ext's feature flags that tell ext2, ext3 and ext4 apart.
const (
	extCompatHasJournal = 0x4
	extIncompatExtents  = 0x40
	extIncompat64Bit    = 0x80
	extIncompatFlexBG   = 0x200
)

// extKind tells ext2, ext3 and ext4 (which share a magic) apart by their
// superblock's features, as blkid does.
func extKind(sb []byte) Filesystem {
	compat := binary.LittleEndian.Uint32(sb[0x5c:])
	incompat := binary.LittleEndian.Uint32(sb[0x60:])
	switch {
	case incompat&(extIncompatExtents|extIncompat64Bit|extIncompatFlexBG) != 0:
		return Ext4
	case compat&extCompatHasJournal != 0:
		return Ext3
	}
	return Ext2
}
