package installer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestParseSums(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("B", 64)
	got, err := ParseSums([]byte(a + "  slot.squashfs\n" + b + " *disk-head.img\r\n\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"slot.squashfs": a, "disk-head.img": strings.ToLower(b)}, got)

	for name, in := range map[string]string{
		"short sum":    "abc  slot.squashfs\n",
		"not hex":      strings.Repeat("g", 64) + "  slot.squashfs\n",
		"no name":      a + "  \n",
		"a path":       a + "  ../slot.squashfs\n",
		"listed twice": a + "  x\n" + a + "  x\n",
		"too big":      strings.Repeat(a+"  x\n", maxSumsSize/66+1),
	} {
		_, err := ParseSums([]byte(in))
		assert.Error(t, err, name)
	}
}

// FuzzParseSums: SHA256SUMS comes from whatever medium the node booted;
// parsing never panics and every sum it returns is 64 hex digits.
func FuzzParseSums(f *testing.F) {
	f.Add([]byte(strings.Repeat("a", 64) + "  slot.squashfs\n"))
	f.Add([]byte("\n\n *"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sums, err := ParseSums(b)
		if err != nil {
			return
		}
		for name, s := range sums {
			if _, err := hex.DecodeString(s); err != nil || len(s) != 64 || name == "" {
				t.Fatalf("%q: %q", name, s)
			}
		}
	})
}

func TestParseVPD80(t *testing.T) {
	s, err := parseVPD80([]byte{0, 0x80, 0, 6, 'Q', 'M', '0', '1', ' ', 0})
	require.NoError(t, err)
	assert.Equal(t, "QM01", s)
	for _, bad := range [][]byte{nil, {0, 0x83, 0, 1, 'x'}, {0, 0x80, 0, 9, 'x'}} {
		_, err := parseVPD80(bad)
		assert.Error(t, err)
	}
}

// FuzzParseVPD80: the page comes from a disk's firmware.
func FuzzParseVPD80(f *testing.F) {
	f.Add([]byte{0, 0x80, 0, 4, 'Q', 'M', '0', '1'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := parseVPD80(b); err == nil && len(s) > len(b) {
			t.Fatalf("serial %q longer than the page", s)
		}
	})
}

// fakeMachine is a sysfs and /dev/disk tree.
type fakeMachine struct {
	t                 *testing.T
	sysBlock, devDisk string
}

func newFakeMachine(t *testing.T) *fakeMachine {
	root := t.TempDir()
	m := &fakeMachine{t: t, sysBlock: filepath.Join(root, "sys/class/block"), devDisk: filepath.Join(root, "dev/disk")}
	for _, d := range []string{m.sysBlock, filepath.Join(m.devDisk, "by-path"), filepath.Join(m.devDisk, "by-id")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	return m
}

// disk adds a whole disk; files maps sysfs file names to content.
func (m *fakeMachine) disk(name string, files map[string]string, links ...string) {
	dev := filepath.Join(filepath.Dir(filepath.Dir(m.sysBlock)), "devices", name)
	for f, content := range files {
		require.NoError(m.t, os.MkdirAll(filepath.Dir(filepath.Join(dev, f)), 0o755))
		require.NoError(m.t, os.WriteFile(filepath.Join(dev, f), []byte(content), 0o644))
	}
	require.NoError(m.t, os.MkdirAll(dev, 0o755))
	require.NoError(m.t, os.Symlink(dev, filepath.Join(m.sysBlock, name)))
	for _, l := range links {
		require.NoError(m.t, os.Symlink("../../"+name, filepath.Join(m.devDisk, l)))
	}
}

func TestList(t *testing.T) {
	m := newFakeMachine(t)
	m.disk("vda", map[string]string{"size": "16777216\n", "removable": "0\n", "serial": "TERRA1\n", "queue/logical_block_size": "512\n"}, "by-path/pci-0000:00:04.0")
	m.disk("sda", map[string]string{"size": "2097152\n", "removable": "1\n", "device/vpd_pg80": "\x00\x80\x00\x04QM01"},
		"by-path/pci-0000:00:06.0-usb-0:1:1.0-scsi-0:0:0:0", "by-id/usb-QEMU_QEMU_HARDDISK_1-0000:00:06.0-1-0:0")
	m.disk("sr0", map[string]string{"size": "1200000\n", "removable": "1\n"})
	m.disk("loop0", map[string]string{"size": "100\n"})
	m.disk("vda1", map[string]string{"partition": "1\n", "size": "100\n"})

	udev := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(udev, "b8:16"), []byte("S:disk/by-id/usb-QEMU_QEMU_HARDDISK_TERRAISO01-0:0\nE:ID_SERIAL=QEMU_QEMU_HARDDISK_TERRAISO01-0:0\nE:ID_SERIAL_SHORT=TERRAISO01\n"), 0o644))
	m.disk("sdb", map[string]string{"size": "2097152\n", "removable": "0\n", "dev": "8:16\n"})
	disks, err := List(m.sysBlock, m.devDisk, udev)
	require.NoError(t, err)
	assert.Equal(t, []Disk{
		{Name: "sda", Size: 1 << 30, Serial: "QM01", Removable: true, Links: []string{
			"/dev/disk/by-id/usb-QEMU_QEMU_HARDDISK_1-0000:00:06.0-1-0:0", "/dev/disk/by-path/pci-0000:00:06.0-usb-0:1:1.0-scsi-0:0:0:0"}},
		{Name: "sdb", Size: 1 << 30, Serial: "TERRAISO01"},
		{Name: "sr0", Size: 1200000 * 512, Removable: true, Optical: true},
		{Name: "vda", Size: 8 << 30, Serial: "TERRA1", SectorSize: 512, Links: []string{"/dev/disk/by-path/pci-0000:00:04.0"}},
	}, disks)
	assert.Equal(t, "/dev/vda (8.0 GiB, serial TERRA1)", disks[3].String())
}

func TestSelect(t *testing.T) {
	disks := []Disk{
		{Name: "nvme0n1", Size: 256 << 30, Serial: "S4EW", Links: []string{"/dev/disk/by-id/nvme-Samsung_S4EW", "/dev/disk/by-path/pci-0000:01:00.0-nvme-1"}},
		{Name: "sda", Size: 16 << 30, Serial: "USB1", Removable: true, Links: []string{"/dev/disk/by-path/pci-0000:00:14.0-usb-0:1:1.0-scsi-0:0:0:0"}},
		{Name: "sdb", Size: 2 << 40, Serial: "HDD9", SectorSize: 512},
		{Name: "sdc", Size: 1 << 40, Serial: "4KN1", SectorSize: 4096},
		{Name: "sr0", Size: 1 << 30, Optical: true},
		{Name: "vda", Size: 1 << 30},
	}
	const need = 4 << 30
	tests := []struct {
		name   string
		sel    machineconfig.DiskSelector
		medium string
		inUse  map[string]string
		want   string
		err    error
		says   []string
	}{
		{name: "any: the first that fits", medium: "sda", want: "nvme0n1"},
		{name: "not a disk in use", medium: "sda", inUse: map[string]string{"nvme0n1": "holds this live boot's TERRA-STATE"}, want: "sdb"},
		{name: "not a 4Kn disk", sel: machineconfig.DiskSelector{Serial: "4KN1"}, medium: "sda", err: ErrNoTarget,
			says: []string{"/dev/sdc (1.0 TiB, serial 4KN1): 4096-byte sectors (Terrarium's image has 512-byte ones)"}},
		{name: "by serial", sel: machineconfig.DiskSelector{Serial: "HDD9"}, medium: "sda", want: "sdb"},
		{name: "by id", sel: machineconfig.DiskSelector{ID: "/dev/disk/by-id/nvme-Samsung_S4EW"}, medium: "sda", want: "nvme0n1"},
		{name: "by size", sel: machineconfig.DiskSelector{MinSize: "1TiB"}, medium: "sda", want: "sdb"},
		{name: "a removable disk named by path", sel: machineconfig.DiskSelector{Path: "/dev/disk/by-path/pci-0000:00:14.0-usb-0:1:1.0-scsi-0:0:0:0"}, medium: "sr0", want: "sda"},
		{name: "the boot medium by path", sel: machineconfig.DiskSelector{Path: "/dev/disk/by-path/pci-0000:00:14.0-usb-0:1:1.0-scsi-0:0:0:0"}, medium: "sda",
			err: ErrBootMedium, says: []string{"selects /dev/sda (16.0 GiB, serial USB1), the medium this node booted from", "select another disk"}},
		{name: "the boot medium by serial", sel: machineconfig.DiskSelector{Serial: "USB1"}, medium: "sda", err: ErrBootMedium},
		{name: "none fits", sel: machineconfig.DiskSelector{MaxSize: "20GiB"}, medium: "sda", err: ErrNoTarget, says: []string{
			"install.disk selects maxSize 20GiB, and none fits",
			"/dev/nvme0n1 (256.0 GiB, serial S4EW): larger than maxSize 20GiB",
			"/dev/sda (16.0 GiB, serial USB1): the boot medium",
			"/dev/sr0 (1.0 GiB): an optical drive",
			"/dev/vda (1.0 GiB): smaller than the 4.0 GiB Terrarium needs",
		}},
		{name: "a removable disk is not taken unasked", sel: machineconfig.DiskSelector{MaxSize: "20GiB"}, medium: "sr0", err: ErrNoTarget,
			says: []string{"/dev/sda (16.0 GiB, serial USB1): removable (select it by path, id or serial to use it)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Select(disks, tt.sel, Rules{Medium: tt.medium, MinSize: need, InUse: tt.inUse})
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				for _, s := range tt.says {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.Name)
		})
	}
}

// fakeMedium writes an installer medium: a head holding a GPT with the
// EFI partition (1 MiB of content), slots A and B of 4 MiB each, a slot
// file, and SHA256SUMS.
type fakeMedium struct {
	Medium
	slot, espContent []byte
	slotAStart       int64
}

func newFakeMedium(t *testing.T) fakeMedium {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "terrarium"), 0o755))
	const mib = uint64(layout.MiB)
	m := fakeMedium{Medium: Medium{Dir: dir}, slotAStart: 3 * layout.MiB}
	table := &gpt.Table{LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true, GUID: "11111111-2222-4333-8444-555555555555", Partitions: []*gpt.Partition{
		{Index: 1, Start: mib / 512, End: 3*mib/512 - 1, Size: 2 * mib, Type: gpt.Type(layout.TypeESP), Name: layout.LabelESP, GUID: "AAAAAAAA-0000-4000-8000-000000000001"},
		{Index: 2, Start: 3 * mib / 512, End: 7*mib/512 - 1, Size: 4 * mib, Type: gpt.Type(layout.TypeRootX86_64), Name: layout.LabelSlotA, GUID: "AAAAAAAA-0000-4000-8000-000000000002"},
		{Index: 3, Start: 7 * mib / 512, End: 11*mib/512 - 1, Size: 4 * mib, Type: gpt.Type(layout.TypeRootX86_64), Name: layout.LabelSlotB, GUID: "AAAAAAAA-0000-4000-8000-000000000003"},
	}}
	img := filepath.Join(dir, "full.img")
	f, err := os.Create(img)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(12*mib)))
	require.NoError(t, table.Write(f, int64(12*mib)))
	m.espContent = bytes.Repeat([]byte("FAT "), int(mib/4))
	_, err = f.WriteAt(m.espContent, int64(mib))
	require.NoError(t, err)
	head := make([]byte, 2*mib)
	_, err = f.ReadAt(head, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Remove(img))
	m.slot = bytes.Repeat([]byte("hsqs slot "), 300000) // 3 MB, not a whole MiB
	write := func(name string, b []byte) {
		require.NoError(t, os.WriteFile(m.File(name), b, 0o644))
	}
	write(layout.ISOHeadFile, head)
	write(layout.ISOSlotFile, m.slot)
	write(layout.ISOSumsFile, []byte(hexSum(head)+"  disk-head.img\n"+hexSum(m.slot)+"  slot.squashfs\n"))
	return m
}

func target(t *testing.T, size int64, junk []byte) string {
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	if junk != nil {
		_, err = f.WriteAt(junk, 0)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	return p
}

// fileSum hashes what the file p holds, walking only its data extents
// (SEEK_DATA, SEEK_HOLE): a sparse disk of hundreds of MiB with a few bytes
// written hashes at once, and any write changes the sum, even zeros
// written into a hole (which make an extent).
func fileSum(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	h := sha256.New()
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole from off to the end
		}
		require.NoError(t, err)
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		require.NoError(t, err)
		_, _ = fmt.Fprintf(h, "%d-%d:", data, hole) // a hash never fails a write
		_, err = io.Copy(h, io.NewSectionReader(f, data, hole-data))
		require.NoError(t, err)
		off = hole
	}
	_, _ = fmt.Fprintf(h, "size %d", fi.Size())
	return hex.EncodeToString(h.Sum(nil))
}

// TestInstall installs a fake medium onto a file and checks the disk the
// way sgdisk and the installed system's initramfs read it.
func TestInstall(t *testing.T) {
	_, err := exec.LookPath("sgdisk")
	require.NoError(t, err, "sgdisk not found: run make deps")
	m := newFakeMedium(t)
	size := int64(1 << 30)
	disk := target(t, size, nil)
	seeded := t.TempDir()
	var formatted, mounted, closed, lines []string
	efi := &efiboot.Vars{Dir: t.TempDir()}
	res, err := Install(context.Background(), Options{
		Target: Disk{Name: "vda", Size: size}, Medium: m.Medium, Dev: disk, Boot: efi,
		Report: func(s string) { lines = append(lines, s) },
		State: &State{
			PartitionDev: func(_ context.Context, n int) (string, error) { return "partition-" + string(rune('0'+n)), nil },
			Format: func(_ context.Context, dev string) (string, func() error, error) {
				formatted = append(formatted, dev)
				return "/dev/mapper/" + dev, func() error { closed = append(closed, dev); return nil }, nil
			},
			WithMounted: func(_ context.Context, dev string, fn func(string) error) error {
				mounted = append(mounted, dev)
				return fn(seeded)
			},
			Seed: func(dir string) error { return os.WriteFile(filepath.Join(dir, "seed"), []byte("enrolled"), 0o600) },
		},
	})
	require.NoError(t, err)
	assert.Equal(t, hexSum(m.slot), res.SlotSHA256)
	assert.Equal(t, []string{"partition-4"}, formatted, "TERRA-STATE is the fourth partition")
	assert.Equal(t, []string{"/dev/mapper/partition-4"}, mounted, "seeded where Format made the filesystem (an encrypted volume's)")
	assert.Equal(t, []string{"partition-4"}, closed, "the volume Format opened is closed after")
	assert.FileExists(t, filepath.Join(seeded, "seed"))
	assert.Contains(t, strings.Join(lines, "\n"), "writing slot A: 100%")

	out, err := exec.Command("sgdisk", "-v", disk).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "No problems found")
	out, err = exec.Command("sgdisk", "-p", disk).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, label := range []string{layout.LabelESP, layout.LabelSlotA, layout.LabelSlotB, layout.LabelState} {
		assert.Contains(t, string(out), label)
	}
	out, err = exec.Command("sgdisk", "-i", "1", disk).CombinedOutput()
	require.NoError(t, err, "%s", out)
	guid := regexp.MustCompile(`Partition unique GUID: (\S+)`).FindStringSubmatch(string(out))
	require.Len(t, guid, 2, "%s", out)
	assert.True(t, strings.EqualFold(guid[1], res.ESP.GUID), "the boot option names the EFI partition's GUID as sgdisk reads it: %s vs %s", guid[1], res.ESP.GUID)
	assert.NotEqual(t, "AAAAAAAA-0000-4000-8000-000000000001", strings.ToUpper(res.ESP.GUID), "fresh GUIDs, not the image's")
	assert.Equal(t, uint64(2048), res.ESP.Start)

	f, err := os.Open(disk)
	require.NoError(t, err)
	defer f.Close()
	got := make([]byte, len(m.slot))
	_, err = f.ReadAt(got, m.slotAStart)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(m.slot, got), "slot A holds the slot")
	esp := make([]byte, len(m.espContent))
	_, err = f.ReadAt(esp, layout.MiB)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(m.espContent, esp), "the EFI partition holds the head's")

	require.Equal(t, 0, res.BootOption)
	order, err := efi.BootOrder()
	require.NoError(t, err)
	assert.Equal(t, []uint16{0}, order)
	n, ok, err := efi.Find(res.ESP.GUID)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint16(0), n)
}

// TestInstallRefusesAndWritesNothing: a disk with data (without wipe), a
// corrupt medium and a disk too small are each refused by name, before
// a byte of the target changes.
// TestFileSumSeesAnyWrite: the sum TestInstallRefusesAndWritesNothing
// compares changes with any write to the sparse disk: a byte in its data,
// zeros into a hole.
func TestFileSumSeesAnyWrite(t *testing.T) {
	disk := target(t, 600<<20, []byte("data"))
	before := fileSum(t, disk)
	assert.Equal(t, before, fileSum(t, disk), "the same file, the same sum")
	for _, w := range []struct {
		at   int64
		data []byte
	}{{1, []byte("A")}, {300 << 20, make([]byte, 512)}} {
		f, err := os.OpenFile(disk, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(w.data, w.at)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		after := fileSum(t, disk)
		assert.NotEqual(t, before, after, "a write of %d bytes at %d", len(w.data), w.at)
		before = after
	}
}

func TestInstallRefusesAndWritesNothing(t *testing.T) {
	gptJunk := make([]byte, 1024)
	copy(gptJunk[512:], "EFI PART")
	tests := []struct {
		name    string
		size    int64
		junk    []byte
		corrupt bool
		wipe    bool
		err     error
		says    string
	}{
		{name: "a disk with a GPT", size: 600 << 20, junk: gptJunk, err: ErrNotEmpty, says: "holds a GPT partition table; set install.wipe: true"},
		{name: "a disk with data", size: 600 << 20, junk: []byte("data"), err: ErrNotEmpty, says: "holds data"},
		{name: "a corrupt medium", size: 600 << 20, corrupt: true, wipe: true, err: ErrMediumCorrupt, says: "slot.squashfs has sha256"},
		{name: "a disk too small", size: 256 << 20, wipe: true, says: "Terrarium needs at least"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newFakeMedium(t)
			if tt.corrupt {
				b := append([]byte(nil), m.slot...)
				b[len(b)/2] ^= 1
				require.NoError(t, os.WriteFile(m.File(layout.ISOSlotFile), b, 0o644))
			}
			disk := target(t, tt.size, tt.junk)
			before := fileSum(t, disk)
			efi := t.TempDir()
			_, err := Install(context.Background(), Options{Target: Disk{Name: "vda", Size: tt.size}, Medium: m.Medium, Dev: disk, Wipe: tt.wipe, Boot: &efiboot.Vars{Dir: efi}})
			require.Error(t, err)
			if tt.err != nil {
				assert.True(t, errors.Is(err, tt.err), "%v", err)
			}
			assert.Contains(t, err.Error(), tt.says)
			assert.Equal(t, before, fileSum(t, disk), "the target is unchanged")
			entries, _ := os.ReadDir(efi)
			assert.Empty(t, entries, "no boot variable written")
		})
	}
}

func TestMinDiskSize(t *testing.T) {
	m := newFakeMedium(t)
	got, err := m.MinDiskSize()
	require.NoError(t, err)
	assert.Equal(t, 11*layout.MiB+layout.Alignment+layout.MinStateSize+layout.GPTReserve, got)
}

func TestInstalled(t *testing.T) {
	m := newFakeMachine(t)
	part := func(disk, name, label string) {
		dev := filepath.Join(filepath.Dir(filepath.Dir(m.sysBlock)), "devices", disk, name)
		require.NoError(t, os.MkdirAll(dev, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dev, "uevent"), []byte("DEVTYPE=partition\nPARTNAME="+label+"\n"), 0o644))
		require.NoError(t, os.Symlink(dev, filepath.Join(m.sysBlock, name)))
	}
	m.disk("vda", nil)
	part("vda", "vda1", layout.LabelESP)
	part("vda", "vda2", layout.LabelSlotA)
	part("vda", "vda4", layout.LabelState)
	m.disk("vdb", nil)
	part("vdb", "vdb1", layout.LabelState) // a live boot's STATE disk
	m.disk("sda", nil)
	part("sda", "sda2", "Appended2") // the ISO written to a stick
	got, err := Installed(m.sysBlock)
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"vda": true}, got)
}
