package iso

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/esp"
)

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) {
	t.Helper()
	_, err := exec.LookPath(name)
	require.NoError(t, err, "%s not found: run make deps", name)
}

// writeFile writes data to dir/name and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// inputs writes a small ESP (esp.Write, fake boot files) and a fake slot.
func inputs(t *testing.T) Inputs {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string { return writeFile(t, dir, name, data) }
	c := esp.Contents{
		SystemdBoot: write("sd-boot.efi", bytes.Repeat([]byte("MZ systemd-boot "), 5000)),
		Entries: []esp.Entry{{
			Slot: layout.SlotA, Title: "Terrarium 1.0 (live)", Version: "1.0",
			Kernel: write("vmlinuz", bytes.Repeat([]byte("kernel "), 30000)),
			Initrd: write("initrd", bytes.Repeat([]byte("initrd "), 7000)), Cmdline: []string{layout.CmdlineLive},
			SortKey: "terrarium-1",
		}},
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600")
	espImg := filepath.Join(dir, "esp.img")
	require.NoError(t, esp.Write(context.Background(), espImg, 64*layout.MiB, c, time.Unix(1767225600, 0)))
	slot := bytes.Repeat([]byte("hsqs slot content "), 200000) // 3.6 MB
	return Inputs{
		ESP: espImg, Slot: write("slot.img", slot), Head: write("head.img", bytes.Repeat([]byte("GPT and FAT "), 100000)),
		Release: []byte(`{"name":"terrarium","version":"1.0"}` + "\n"),
		Epoch:   time.Unix(1767225600, 0).UTC(),
	}
}

func sha(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// TestWrite builds an ISO with the real xorriso and checks it the way its
// users' tools see it: xorriso's El Torito report, the GPT's EFI partition
// (the ESP byte for byte), the volume ID the initramfs looks for, the
// files, and a second build byte-identical although the inputs' file dates
// changed.
func TestWrite(t *testing.T) {
	requireTool(t, "xorriso")
	in := inputs(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "a.iso")
	require.NoError(t, Write(context.Background(), out, in))

	t.Run("el torito", func(t *testing.T) {
		rep, err := exec.Command("xorriso", "-indev", out, "-report_el_torito", "as_mkisofs").CombinedOutput()
		require.NoError(t, err, "%s", rep)
		report := string(rep)
		assert.Contains(t, report, "-V 'TERRARIUM'")
		assert.Contains(t, report, "-append_partition 2 ")
		assert.Contains(t, report, "-e '--interval:appended_partition_2")
		assert.Contains(t, report, "-appended_part_as_gpt")
		assert.NotContains(t, report, "-b ", "no BIOS boot image: the ISO boots under UEFI only")
	})

	t.Run("efi partition is the esp", func(t *testing.T) {
		d, err := diskfs.Open(out, diskfs.WithOpenMode(diskfs.ReadOnly))
		require.NoError(t, err)
		defer d.Close()
		pt, err := d.GetPartitionTable()
		require.NoError(t, err)
		table, ok := pt.(*gpt.Table)
		require.True(t, ok, "a GPT (for USB sticks written with dd)")
		var efi *gpt.Partition
		for _, p := range table.Partitions {
			if strings.EqualFold(string(p.Type), layout.TypeESP) {
				efi = p
			}
		}
		require.NotNil(t, efi, "an EFI system partition: %+v", table.Partitions)
		want, err := os.ReadFile(in.ESP)
		require.NoError(t, err)
		f, err := os.Open(out)
		require.NoError(t, err)
		defer f.Close()
		got := make([]byte, len(want))
		_, err = f.ReadAt(got, int64(efi.Start)*int64(table.LogicalSectorSize))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "the EFI partition holds the ESP image")
	})

	t.Run("volume id", func(t *testing.T) {
		f, err := os.Open(out)
		require.NoError(t, err)
		defer f.Close()
		pvd := make([]byte, 72)
		_, err = f.ReadAt(pvd, 16*2048)
		require.NoError(t, err)
		assert.Equal(t, "CD001", string(pvd[1:6]))
		assert.Equal(t, layout.ISOVolumeID, strings.TrimRight(string(pvd[40:72]), " "))
	})

	t.Run("files", func(t *testing.T) {
		x := t.TempDir()
		b, err := exec.Command("xorriso", "-osirrox", "on", "-indev", out, "-extract", "/terrarium", x).CombinedOutput()
		require.NoError(t, err, "%s", b)
		assert.Equal(t, sha(t, in.Slot), sha(t, filepath.Join(x, filepath.Base(layout.ISOSlotFile))))
		rel, err := os.ReadFile(filepath.Join(x, filepath.Base(layout.ISOReleaseFile)))
		require.NoError(t, err)
		assert.Equal(t, string(in.Release), string(rel))
		sums, err := os.ReadFile(filepath.Join(x, filepath.Base(layout.ISOSumsFile)))
		require.NoError(t, err)
		assert.Equal(t, SumsLine(layout.ISOHeadFile, sha(t, in.Head))+SumsLine(layout.ISOSlotFile, sha(t, in.Slot)), string(sums))
		assert.Equal(t, sha(t, in.Head), sha(t, filepath.Join(x, filepath.Base(layout.ISOHeadFile))))
	})

	t.Run("reproducible", func(t *testing.T) {
		later := time.Now().Add(-time.Hour)
		for _, f := range []string{in.ESP, in.Slot, in.Head} {
			require.NoError(t, os.Chtimes(f, later, later))
		}
		again := filepath.Join(dir, "b.iso")
		require.NoError(t, Write(context.Background(), again, in))
		assert.Equal(t, sha(t, out), sha(t, again), "two builds of the same inputs")
	})
}

// biosInputs are in with fake GRUB images for BIOS boot: xorriso only
// places them and patches their block addresses (QEMU boots the real
// ones: qemu-tests' TestConfigChannels and TestISOInstallBIOS).
func biosInputs(t *testing.T, in Inputs) Inputs {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string { return writeFile(t, dir, name, data) }
	mbr := bytes.Repeat([]byte{0xeb}, 512)
	in.BIOS = &BIOS{
		Core:      write("eltorito.img", bytes.Repeat([]byte("GRUB core "), 3000)),
		HybridMBR: write("boot_hybrid.img", mbr),
		Config:    []byte("set default=terrarium-live\n"),
		Kernel:    write("vmlinuz", bytes.Repeat([]byte("kernel "), 30000)),
		Initrd:    write("initrd", bytes.Repeat([]byte("initrd "), 7000)),
	}
	return in
}

// TestWriteBIOS: with GRUB's images the ISO boots under BIOS too: El
// Torito's first image is GRUB's core (the EFI image the alternative), the
// MBR carries GRUB's hybrid boot code in front of an unchanged protective
// MBR and GPT, and GRUB's menu, kernel and initramfs are on the ISO. The
// core image on the cache is never patched, and two builds are the same.
func TestWriteBIOS(t *testing.T) {
	requireTool(t, "xorriso")
	requireTool(t, "sgdisk")
	in := biosInputs(t, inputs(t))
	coreBefore := sha(t, in.BIOS.Core)
	dir := t.TempDir()
	out := filepath.Join(dir, "a.iso")
	require.NoError(t, Write(context.Background(), out, in))

	rep, err := exec.Command("xorriso", "-indev", out, "-report_el_torito", "plain").CombinedOutput()
	require.NoError(t, err, "%s", rep)
	report := string(rep)
	assert.Regexp(t, `El Torito boot img :\s+1\s+BIOS\s+y\s+none\s+0x0000\s+0x00\s+4`, report, "BIOS first, no emulation, 4 sectors")
	assert.Regexp(t, `El Torito boot img :\s+2\s+UEFI`, report)
	assert.Contains(t, report, "/"+layout.ISOGrubCore)
	asMkisofs, err := exec.Command("xorriso", "-indev", out, "-report_el_torito", "as_mkisofs").CombinedOutput()
	require.NoError(t, err, "%s", asMkisofs)
	assert.Contains(t, string(asMkisofs), "--grub2-mbr")
	assert.Contains(t, string(asMkisofs), "-boot-info-table")
	assert.Contains(t, string(asMkisofs), "-appended_part_as_gpt", "the GPT for UEFI sticks stays")

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	mbr := make([]byte, 512)
	_, err = f.ReadAt(mbr, 0)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{0xeb}, 0x1b0), mbr[:0x1b0], "GRUB's hybrid boot code")
	assert.Equal(t, []byte{0x55, 0xaa}, mbr[510:])
	assert.Equal(t, byte(0xee), mbr[0x1be+4], "the protective MBR's partition")
	assert.Equal(t, byte(0x80), mbr[0x1ce], "a dummy active partition, for BIOSes that want one")
	b, err := exec.Command("sgdisk", "-v", out).CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "No problems found")

	x := t.TempDir()
	b, err = exec.Command("xorriso", "-osirrox", "on", "-indev", out, "-extract", "/"+layout.ISOGrubDir, x).CombinedOutput()
	require.NoError(t, err, "%s", b)
	cfg, err := os.ReadFile(filepath.Join(x, filepath.Base(layout.ISOGrubConfig)))
	require.NoError(t, err)
	assert.Equal(t, string(in.BIOS.Config), string(cfg))
	assert.Equal(t, sha(t, in.BIOS.Kernel), sha(t, filepath.Join(x, filepath.Base(layout.ISOGrubKernel))))
	assert.Equal(t, sha(t, in.BIOS.Initrd), sha(t, filepath.Join(x, filepath.Base(layout.ISOGrubInitrd))))
	assert.Equal(t, coreBefore, sha(t, in.BIOS.Core), "the cache's core image is not patched")
	assert.NotEqual(t, coreBefore, sha(t, filepath.Join(x, filepath.Base(layout.ISOGrubCore))), "the ISO's is: its boot info table")

	again := filepath.Join(dir, "b.iso")
	require.NoError(t, Write(context.Background(), again, in))
	assert.Equal(t, sha(t, out), sha(t, again), "two builds of the same inputs")
}

func TestWriteRefusesMissingInputs(t *testing.T) {
	requireTool(t, "xorriso")
	in := inputs(t)
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	for name, mod := range map[string]func(*Inputs){
		"no esp":     func(in *Inputs) { in.ESP = filepath.Join(t.TempDir(), "nope.img") },
		"no head":    func(in *Inputs) { in.Head = "" },
		"empty slot": func(in *Inputs) { in.Slot = empty },
		"no xorriso": func(in *Inputs) { in.Xorriso = "/nonexistent/xorriso" },
		"no GRUB core": func(in *Inputs) {
			*in = biosInputs(t, *in)
			in.BIOS.Core = filepath.Join(t.TempDir(), "nope.img")
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad := in
			mod(&bad)
			out := filepath.Join(t.TempDir(), "x.iso")
			err := Write(context.Background(), out, bad)
			require.Error(t, err)
			assert.NoFileExists(t, out, "nothing written")
		})
	}
}

func TestArgsMapsFilesInOrder(t *testing.T) {
	args := Args("o.iso", "esp.img", "", map[string]string{"b/y": "/h/y", "a/x": "/h/x"}, time.Unix(100, 0))
	assert.Equal(t, []string{"/a/x=/h/x", "/b/y=/h/y"}, args[len(args)-2:])
	assert.Contains(t, args, "=100")
}
