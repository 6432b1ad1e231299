package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/testvolume"
)

// bpb is a FAT boot sector's BIOS parameter block.
type bpb struct {
	bytesPerSector, reserved, rootEntries, total16, fatSize16 uint16
	perCluster, fats, media                                   byte
	total32, fatSize32                                        uint32
}

// fat32, fat16 and fat12 are boot sectors as mkfs.fat writes them: a
// 1 GiB FAT32 stick, a 50 MiB FAT16 one, a 1.44 MB floppy.
var (
	fat32 = bpb{bytesPerSector: 512, perCluster: 8, reserved: 32, fats: 2, media: 0xf8, total32: 1 << 21, fatSize32: 2048}
	fat16 = bpb{bytesPerSector: 512, perCluster: 4, reserved: 4, fats: 2, rootEntries: 512, media: 0xf8, total32: 100000, fatSize16: 100}
	fat12 = bpb{bytesPerSector: 512, perCluster: 1, reserved: 1, fats: 2, rootEntries: 224, total16: 2880, media: 0xf0, fatSize16: 9}
)

// bootSector writes p's boot sector into a medium of size bytes.
func (p bpb) bootSector(size int) []byte {
	b := make([]byte, size)
	copy(b, "\xeb\x58\x90MSWIN4.1")
	binary.LittleEndian.PutUint16(b[11:], p.bytesPerSector)
	b[13] = p.perCluster
	binary.LittleEndian.PutUint16(b[14:], p.reserved)
	b[16] = p.fats
	binary.LittleEndian.PutUint16(b[17:], p.rootEntries)
	binary.LittleEndian.PutUint16(b[19:], p.total16)
	b[21] = p.media
	binary.LittleEndian.PutUint16(b[22:], p.fatSize16)
	binary.LittleEndian.PutUint32(b[32:], p.total32)
	binary.LittleEndian.PutUint32(b[36:], p.fatSize32)
	if p.fatSize16 == 0 {
		copy(b[82:], "FAT32   ")
	} else {
		copy(b[54:], "FAT16   ")
	}
	b[510], b[511] = 0x55, 0xaa
	return b
}

// exFATBootSector is an exFAT main boot sector with the given sector and
// cluster shifts and FAT count.
func exFATBootSector(sectorShift, clusterShift, fats byte) []byte {
	b := make([]byte, 4096)
	copy(b, "\xeb\x76\x90EXFAT   ")
	binary.LittleEndian.PutUint64(b[72:], 1<<21) // volume length
	b[108], b[109], b[110] = sectorShift, clusterShift, fats
	b[510], b[511] = 0x55, 0xaa
	return b
}

// extSuperblock is an ext2/3/4 superblock with the given features.
func extSuperblock(compat, incompat uint32) []byte {
	b := make([]byte, 4096)
	binary.LittleEndian.PutUint16(b[0x438:], 0xef53)
	binary.LittleEndian.PutUint32(b[0x45c:], compat)
	binary.LittleEndian.PutUint32(b[0x460:], incompat)
	return b
}

// signature writes sig at off of a medium of size bytes.
func signature(size, off int, sig string) []byte {
	b := make([]byte, size)
	copy(b[off:], sig)
	return b
}

func mutate(b []byte, f func(b []byte)) []byte {
	f(b)
	return b
}

// probeCases are crafted first bytes of each kind of medium.
func probeCases() []struct {
	name string
	data []byte
	want Filesystem
} {
	return []struct {
		name string
		data []byte
		want Filesystem
	}{
		{"FAT32", fat32.bootSector(4096), VFAT},
		{"FAT16", fat16.bootSector(4096), VFAT},
		{"FAT12 floppy", fat12.bootSector(512), VFAT},
		{"FAT32 of 4 KiB sectors", mutate(fat32.bootSector(4096), func(b []byte) { b[12] = 0x10 }), VFAT},
		{"FAT with a near jump", mutate(fat16.bootSector(512), func(b []byte) { b[0] = 0xe9 }), VFAT},
		{"FAT without the boot signature", mutate(fat32.bootSector(512), func(b []byte) { b[511] = 0 }), Unknown},
		{"FAT without a jump", mutate(fat32.bootSector(512), func(b []byte) { b[0] = 0x33 }), Unknown},
		{"FAT of 300-byte sectors", mutate(fat32.bootSector(512), func(b []byte) { binary.LittleEndian.PutUint16(b[11:], 300) }), Unknown},
		{"FAT of 3 sectors a cluster", mutate(fat32.bootSector(512), func(b []byte) { b[13] = 3 }), Unknown},
		{"FAT with no reserved sector", mutate(fat16.bootSector(512), func(b []byte) { b[14], b[15] = 0, 0 }), Unknown},
		{"FAT with no FAT", mutate(fat16.bootSector(512), func(b []byte) { b[16] = 0 }), Unknown},
		{"FAT32 with root entries", mutate(fat32.bootSector(512), func(b []byte) { b[17] = 16 }), Unknown},
		{"FAT of a bad media byte", mutate(fat16.bootSector(512), func(b []byte) { b[21] = 0x12 }), Unknown},
		{"FAT with no room for data", mutate(fat12.bootSector(512), func(b []byte) { binary.LittleEndian.PutUint16(b[19:], 20) }), Unknown},
		{"a boot loader's MBR (GRUB's jump, no BPB)", mutate(signature(512, 0, "\xeb\x63\x90"), func(b []byte) { b[510], b[511] = 0x55, 0xaa }), Unknown},
		{"exFAT", exFATBootSector(9, 3, 1), ExFAT},
		{"exFAT of 4 KiB sectors and 2 FATs", exFATBootSector(12, 13, 2), ExFAT},
		{"exFAT of 128-byte sectors", exFATBootSector(7, 3, 1), Unknown},
		{"exFAT of 64 MiB clusters", exFATBootSector(9, 17, 1), Unknown},
		{"exFAT with 3 FATs", exFATBootSector(9, 3, 3), Unknown},
		{"exFAT with a legacy BPB", mutate(exFATBootSector(9, 3, 1), func(b []byte) { b[11] = 2 }), Unknown},
		{"ext2", extSuperblock(0, 0x2), Ext2},
		{"ext3", extSuperblock(extCompatHasJournal, 0x2), Ext3},
		{"ext4", extSuperblock(extCompatHasJournal, 0x2|extIncompatExtents|extIncompatFlexBG), Ext4},
		{"ext4 without a journal", extSuperblock(0, extIncompatExtents), Ext4},
		{"ISO 9660", signature(0x8800, 0x8000, "\x01CD001\x01"), ISO9660},
		{"ISO 9660 of another version", signature(0x8800, 0x8000, "\x01CD001\x02"), Unknown},
		{"btrfs", signature(probeSize, 0x10040, "_BHRfS_M"), Btrfs},
		{"XFS", signature(4096, 0, "XFSB"), XFS},
		{"NTFS", mutate(signature(4096, 0, "\xeb\x52\x90NTFS    "), func(b []byte) { b[510], b[511] = 0x55, 0xaa }), NTFS},
		{"F2FS", signature(4096, 0x400, "\x10\x20\xf5\xf2"), F2FS},
		{"squashfs", signature(4096, 0, "hsqs"), Squashfs},
		{"LUKS", signature(4096, 0, "LUKS\xba\xbe\x00\x02"), LUKS},
		{"zeros", make([]byte, probeSize), Unknown},
		{"nothing", nil, Unknown},
		{"a medium shorter than a sector", []byte("\xeb\x58\x90"), Unknown},
		// The kernel reads sector 0 of a FAT stick: what an earlier
		// filesystem left further on does not change what it is.
		{"FAT over an old ext4", mutate(fat32.bootSector(0x10000), func(b []byte) { copy(b[0x400:], extSuperblock(0, extIncompatExtents)[0x400:]) }), VFAT},
	}
}

func TestProbe(t *testing.T) {
	for _, tc := range probeCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Probe(bytes.NewReader(tc.data))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "found %s", got)
		})
	}
}

// errReader fails every read.
type errReader struct{}

func (errReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("I/O error") }

func TestProbeReadError(t *testing.T) {
	_, err := Probe(errReader{})
	assert.EqualError(t, err, "read the filesystem's first bytes: I/O error")
}

// TestProbeFormatters: what the formatters people and tests use make is
// told right (go-diskfs always; mkfs.* and xorriso where installed).
func TestProbeFormatters(t *testing.T) {
	dir := t.TempDir()
	goDiskfs := func(fsType filesystem.Type, size int64) func(t *testing.T, img string) {
		return func(t *testing.T, img string) {
			d, err := diskfs.Create(img, size, diskfs.SectorSizeDefault)
			require.NoError(t, err)
			_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: fsType, VolumeLabel: "TERRA-SUPPO"})
			require.NoError(t, err)
			require.NoError(t, d.Close())
		}
	}
	tool := func(name string, args ...string) func(t *testing.T, img string) {
		return func(t *testing.T, img string) {
			_, err := exec.LookPath(name)
			require.NoError(t, err, "%s is not installed: make deps installs it (scripts/deps.sh)", name)
			require.NoError(t, os.WriteFile(img, nil, 0o644))
			size := int64(64 << 20)
			if name == "mkfs.btrfs" || name == "mkfs.xfs" {
				size = 320 << 20 // their smallest filesystems; the file stays sparse
			}
			require.NoError(t, os.Truncate(img, size))
			out, err := exec.Command(name, append(args, img)...).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T, img string)
		want Filesystem
	}{
		{"go-diskfs FAT32 (the QEMU tests' sticks)", goDiskfs(filesystem.TypeFat32, 64<<20), VFAT},
		{"go-diskfs FAT16", goDiskfs(filesystem.TypeFat16, 16<<20), VFAT},
		{"mkfs.vfat -F 32", tool("mkfs.vfat", "-F", "32", "-n", "TERRA-SUPPO"), VFAT},
		{"mkfs.vfat -F 16", tool("mkfs.vfat", "-F", "16", "-n", "TERRA-SUPPO"), VFAT},
		{"mkfs.vfat -F 12", tool("mkfs.vfat", "-F", "12", "-S", "4096", "-n", "TERRA-SUPPO"), VFAT},
		{"mkfs.exfat", tool("mkfs.exfat", "-L", "TERRA-SUPPO"), ExFAT},
		{"mkfs.ext4", tool("mkfs.ext4", "-q", "-F", "-L", "TERRA-SUPPORT"), Ext4},
		{"mkfs.ext3", tool("mkfs.ext3", "-q", "-F"), Ext3},
		{"mkfs.ext2", tool("mkfs.ext2", "-q", "-F"), Ext2},
		{"mkfs.btrfs", tool("mkfs.btrfs", "-q", "-f"), Btrfs},
		{"mkfs.xfs", tool("mkfs.xfs", "-q", "-f"), XFS},
		{"mkfs.ntfs", tool("mkfs.ntfs", "-q", "-F", "-f"), NTFS},
		{"xorriso", func(t *testing.T, img string) {
			_, err := exec.LookPath("xorriso")
			require.NoError(t, err, "xorriso is not installed: make deps installs it (scripts/deps.sh)")
			require.NoError(t, os.Rename(testvolume.ISO(t, t.TempDir(), "TERRA-UPGRADE", map[string]string{"a": "b"}), img))
		}, ISO9660},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(tc.name)+".img")
			tc.make(t, img)
			f, err := os.Open(img)
			require.NoError(t, err)
			defer f.Close()
			got, err := Probe(f)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "found %s", got)
		})
	}
}

func TestFilesystemNames(t *testing.T) {
	for fs, want := range map[Filesystem]string{
		Unknown: "no filesystem the node knows",
		VFAT:    "a FAT filesystem",
		ExFAT:   "an exFAT filesystem",
		ISO9660: "an ISO 9660 filesystem",
		Ext4:    "an ext4 filesystem",
		Btrfs:   "a btrfs filesystem",
		XFS:     "an XFS filesystem",
		NTFS:    "an NTFS filesystem",
		LUKS:    "a LUKS (encrypted) filesystem",
	} {
		assert.Equal(t, want, fs.described())
	}
}
