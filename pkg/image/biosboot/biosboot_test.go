package biosboot

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/grubenv"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/diskimage"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fakeCore is shaped like grub-mkimage's i386-pc output where Install
// looks: a first sector ending in its block list (start 2, the other
// sectors, segment 0x820) with a zero terminator before it.
func fakeCore(sectors int) []byte {
	core := bytes.Repeat([]byte{0xc3}, sectors*sector-100)
	copy(core[blocklist-12:], make([]byte, 24))
	binary.LittleEndian.PutUint64(core[blocklist:], 2)
	binary.LittleEndian.PutUint16(core[blocklist+8:], uint16(sectors-1))
	binary.LittleEndian.PutUint16(core[blocklist+10:], coreSegment)
	return core
}

func testDisk(t *testing.T) (string, []diskimage.Placed) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "disk.raw")
	placed, err := diskimage.WriteRaw(context.Background(), path, "test", []diskimage.Partition{
		{Label: layout.LabelESP, Type: layout.TypeESP, Size: 2 * layout.MiB},
		{Label: layout.LabelBIOSBoot, Type: layout.TypeBIOSBoot, Size: layout.BIOSBootSize},
		{Label: layout.LabelSlotA, Type: layout.TypeRootX86_64, Size: 2 * layout.MiB},
	})
	require.NoError(t, err)
	return path, placed
}

func TestInstall(t *testing.T) {
	path, placed := testDisk(t)
	bios := placed[1]
	before := make([]byte, sector)
	f, err := os.Open(path)
	require.NoError(t, err)
	_, err = f.ReadAt(before, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	boot := bytes.Repeat([]byte{0xeb}, sector)
	core := fakeCore(300)
	require.NoError(t, Install(path, bios.Start, bios.Size, boot, core))

	disk, err := os.ReadFile(path)
	require.NoError(t, err)
	mbr := disk[:sector]
	first := uint64(bios.Start / sector)
	assert.Equal(t, first, binary.LittleEndian.Uint64(mbr[bootKernelSector:]), "the boot code loads the core's first sector")
	assert.Equal(t, byte(0xff), mbr[bootDrive])
	assert.Equal(t, []byte{0x90, 0x90}, mbr[bootDriveCheck:bootDriveCheck+2])
	assert.Equal(t, before[mbrCode:], mbr[mbrCode:], "the disk signature, the protective partition and 55AA are kept")
	assert.Equal(t, boot[:bootKernelSector], mbr[:bootKernelSector])

	got := disk[bios.Start : bios.Start+300*sector]
	assert.Equal(t, first+1, binary.LittleEndian.Uint64(got[blocklist:]), "the rest of the core follows its first sector")
	assert.Equal(t, uint16(299), binary.LittleEndian.Uint16(got[blocklist+8:]))
	assert.Equal(t, uint16(coreSegment), binary.LittleEndian.Uint16(got[blocklist+10:]))
	assert.Equal(t, core[sector:], got[sector:len(core)], "the core's other sectors as they were")

	out, err := exec.Command("sgdisk", "-v", path).CombinedOutput()
	require.NoError(t, err, "sgdisk (make deps): %s", out)
	assert.Contains(t, string(out), "No problems found")
}

func TestInstallRefuses(t *testing.T) {
	path, placed := testDisk(t)
	bios := placed[1]
	boot := make([]byte, sector)
	for _, tc := range []struct {
		name       string
		boot, core []byte
		size       int64
		want       string
	}{
		{"short boot.img", boot[:100], fakeCore(10), bios.Size, "boot.img is 100 bytes"},
		{"core bigger than the partition", boot, fakeCore(10), 4 * sector, "must be over one sector"},
		{"core bigger than GRUB loads", boot, fakeCore(maxCoreSectors + 1), bios.Size, "at most 444 KiB"},
		{"used core", boot, func() []byte { c := fakeCore(10); c[blocklist-2] = 1; return c }(), bios.Size, "has a block list already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, Install(path, bios.Start, tc.size, tc.boot, tc.core), tc.want)
		})
	}
	plain := filepath.Join(t.TempDir(), "plain.raw")
	require.NoError(t, os.WriteFile(plain, make([]byte, 4*layout.MiB), 0o644))
	assert.ErrorContains(t, Install(plain, layout.MiB, layout.MiB, boot, fakeCore(10)), "has no protective MBR")
}

func TestGrubCfgGolden(t *testing.T) {
	cfg, err := Config{TimeoutSeconds: 2, Default: layout.SlotA, Cmdline: []string{"console=ttyS0,115200", "quiet"}}.GrubCfg()
	require.NoError(t, err)
	golden := filepath.Join("testdata", "grub.cfg")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(cfg), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), cfg)
}

func TestGrubCfgRefuses(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Default: "c"}, `default slot "c"`},
		{Config{Default: layout.SlotA, Cmdline: []string{"init=$x"}}, `the kernel argument "init=$x"`},
	} {
		_, err := tc.c.GrubCfg()
		assert.ErrorContains(t, err, tc.want)
	}
}

func TestInitialEnv(t *testing.T) {
	b, err := InitialEnv(layout.SlotB)
	require.NoError(t, err)
	env, err := grubenv.Parse(b)
	require.NoError(t, err)
	assert.Equal(t, grubenv.Env{layout.GrubPrefer: "b"}, env)
}

func TestLiveMenuGolden(t *testing.T) {
	cmdline := []string{"console=ttyS0,115200", layout.CmdlineLive, layout.CmdlineSlot + "=a"}
	cfg, err := LiveMenu{TimeoutSeconds: 5, Entries: []LiveEntry{
		{ID: "terrarium-live", Title: "Terrarium 1.2.3 (live)", Cmdline: cmdline},
		{ID: "terrarium-install", Title: "Install Terrarium 1.2.3 to the first empty disk", Cmdline: append(cmdline, layout.CmdlineInstall+"=auto")},
	}}.GrubCfg()
	require.NoError(t, err)
	golden := filepath.Join("testdata", "live-grub.cfg")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(cfg), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), cfg)
}

func TestLiveMenuRefuses(t *testing.T) {
	ok := LiveEntry{ID: "terrarium-live", Title: "Terrarium (live)"}
	for _, tc := range []struct {
		name string
		m    LiveMenu
		want string
	}{
		{"no entry", LiveMenu{}, "has no entry"},
		{"id with a space", LiveMenu{Entries: []LiveEntry{{ID: "a b", Title: "x"}}}, `entry id "a b"`},
		{"title with a quote", LiveMenu{Entries: []LiveEntry{{ID: "x", Title: `say "hi"`}}}, `the title "say \"hi\"" of entry x`},
		{"title with a variable", LiveMenu{Entries: []LiveEntry{ok, {ID: "y", Title: "$root"}}}, `the title "$root" of entry y`},
		{"argument with a variable", LiveMenu{Entries: []LiveEntry{{ID: "x", Title: "x", Cmdline: []string{"init=$x"}}}}, `entry x: the kernel argument "init=$x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.m.GrubCfg()
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
