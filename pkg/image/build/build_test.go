package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// testSpec writes a build spec with the given extra lines and parses it.
func testSpec(t *testing.T, extra string) *spec.Spec {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: terrarium.dev/v1alpha1
kind: BuildSpec
name: unit
version: 1.2.3
os:
  suite: trixie
  packages: [systemd, linux-image-amd64, systemd-boot-efi, grub-pc-bin, busybox-static, e2fsprogs]
kernel:
  cmdline: [console=ttyS0, quiet]
  modules: [virtio_blk]
disk:
  espSizeMiB: 64
  slotSizeMiB: 256
`+extra), 0o644))
	s, err := spec.Parse(path)
	require.NoError(t, err)
	return s
}

var testBoot = bootFiles{kernel: "/base/vmlinuz", sdboot: "/base/sd-boot.efi", initrd: "/cache/initrd.img", kernelVersion: "6.12.0-test"}

func TestESPContents(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		slots []layout.Slot
		want  map[layout.Slot]string // slot -> sort key
	}{
		{"slot A only", "", []layout.Slot{layout.SlotA}, map[layout.Slot]string{layout.SlotA: "terrarium-1"}},
		{"both, A preferred", "slotB: {mode: copy}\n", []layout.Slot{layout.SlotA, layout.SlotB},
			map[layout.Slot]string{layout.SlotA: "terrarium-1", layout.SlotB: "terrarium-2"}},
		{"both, B preferred", "slotB: {mode: copy}\nboot: {default: b, tries: 2}\n", []layout.Slot{layout.SlotA, layout.SlotB},
			map[layout.Slot]string{layout.SlotA: "terrarium-2", layout.SlotB: "terrarium-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec(t, tt.extra)
			slots := map[layout.Slot]string{}
			for _, sl := range tt.slots {
				slots[sl] = "/cache/slot-" + string(sl)
			}
			c, err := espContents(s, testBoot, slots, nil)
			require.NoError(t, err)
			assert.Equal(t, testBoot.sdboot, c.SystemdBoot)
			// BIOS boot: GRUB boots the same entries, the preferred slot
			// first, with the entries' command line.
			assert.Contains(t, c.GrubConfig, "set first="+s.Boot.Default+"\n")
			assert.Contains(t, c.GrubConfig, "linux /terrarium/a/vmlinuz console=ttyS0 quiet terrarium.slot=a\n")
			assert.Contains(t, string(c.GrubEnv), "terrarium_prefer="+s.Boot.Default+"\n")
			got := map[layout.Slot]string{}
			for _, e := range c.Entries {
				got[e.Slot] = e.SortKey
				assert.Equal(t, s.Boot.Tries, e.Tries, "every disk entry counts its boots")
				assert.Equal(t, []string{"console=ttyS0", "quiet"}, e.Cmdline)
				assert.Equal(t, testBoot.kernel, e.Kernel)
				assert.Equal(t, testBoot.initrd, e.Initrd)
				assert.Contains(t, e.Title, "1.2.3")
			}
			assert.Equal(t, tt.want, got, "entries and their sort keys")
		})
	}
}

// TestReleaseRecordsBootTries: a slot's release.json carries the spec's
// boot.tries, which the node gives the slots its upgrades write.
func TestReleaseRecordsBootTries(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		want  int
	}{
		{"default", "", 3},
		{"one try", "boot: {tries: 1}\n", 1},
		{"nine tries", "boot: {tries: 9}\n", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := releaseOf(testSpec(t, tt.extra), testBoot.kernelVersion, nil)
			assert.Equal(t, tt.want, r.BootTries)
			assert.Equal(t, "1.2.3", r.Version)
		})
	}
}

func TestISOContents(t *testing.T) {
	for _, tc := range []struct {
		timeout, want int
	}{{0, isoMenuSeconds}, {12, 12}} {
		s := testSpec(t, fmt.Sprintf("boot: {timeoutSeconds: %d}\n", tc.timeout))
		c := isoContents(s, testBoot, nil)
		assert.Equal(t, tc.want, c.TimeoutSeconds, "the menu shows at least %d s", isoMenuSeconds)
		require.Len(t, c.Entries, 2)
		live, install := c.Entries[0], c.Entries[1]
		assert.Equal(t, []string{"console=ttyS0", "quiet", layout.CmdlineLive}, live.Cmdline)
		assert.Equal(t, []string{"console=ttyS0", "quiet", layout.CmdlineLive, layout.CmdlineInstall + "=auto"}, install.Cmdline)
		assert.Equal(t, "terrarium-install", install.ID)
		assert.Less(t, live.SortKey, install.SortKey, "live boots by default")
		for _, e := range c.Entries {
			assert.Zero(t, e.Tries, "an entry on read-only media is never counted")
		}
		assert.Equal(t, []string{"console=ttyS0", "quiet"}, s.Kernel.Cmdline, "the spec's command line is not changed")
	}
}

// A Secure Boot build's ISO carries the live entry alone, as its signed
// UKI, with systemd-boot signed and the enrollment files.
func TestISOContentsSecureBoot(t *testing.T) {
	s := testSpec(t, "")
	signed := &signedBoot{sdboot: "/work/sd-signed.efi", liveUKI: "/work/live.efi", enrollKeys: map[string]string{"db.auth": "/work/db.auth"}}
	c := isoContents(s, testBoot, signed)
	require.Len(t, c.Entries, 1)
	live := c.Entries[0]
	assert.Equal(t, "/work/live.efi", live.UKI)
	assert.Contains(t, live.Title, "(live)")
	assert.Equal(t, "/work/sd-signed.efi", c.SystemdBoot)
	assert.Equal(t, signed.enrollKeys, c.EnrollKeys)
	files := c.Files()
	assert.Equal(t, "file:/work/live.efi", files[layout.SlotA.UKIPath()])
	for name := range files {
		assert.NotContains(t, name, "vmlinuz", "a bare kernel on a Secure Boot ISO")
	}
}

func TestDiskPartitions(t *testing.T) {
	s := testSpec(t, "")
	parts := diskPartitions(s, "/work/esp.img", map[layout.Slot]string{layout.SlotA: "/cache/a.squashfs"})
	require.Len(t, parts, 4)
	assert.Equal(t, []string{layout.LabelESP, layout.LabelBIOSBoot, layout.LabelSlotA, layout.LabelSlotB}, []string{parts[0].Label, parts[1].Label, parts[2].Label, parts[3].Label})
	assert.Equal(t, []int64{64 * layout.MiB, layout.MiB, 256 * layout.MiB, 256 * layout.MiB}, []int64{parts[0].Size, parts[1].Size, parts[2].Size, parts[3].Size})
	assert.Equal(t, []string{"/work/esp.img", "", "/cache/a.squashfs", ""}, []string{parts[0].Source, parts[1].Source, parts[2].Source, parts[3].Source},
		"slot B is empty without an image; GRUB's core is written into BIOS-BOOT after")

	// A Secure Boot image boots under UEFI alone: no BIOS boot partition.
	keys := filepath.Join(t.TempDir(), "keys")
	_, err := secureboot.Generate(keys, "plant-7")
	require.NoError(t, err)
	sb := testSpec(t, "secureBoot: {keys: "+keys+"}\n")
	parts = diskPartitions(sb, "/work/esp.img", map[layout.Slot]string{layout.SlotA: "/cache/a.squashfs"})
	assert.Equal(t, []string{layout.LabelESP, layout.LabelSlotA, layout.LabelSlotB}, []string{parts[0].Label, parts[1].Label, parts[2].Label})
	assert.Len(t, parts, 3)
}

func TestAddUnique(t *testing.T) {
	seen := map[string]string{}
	require.NoError(t, addUnique(seen, []bundle.Resolved{{Name: "registry.k8s.io/pause:3.10"}}, "kubernetes.yaml"))
	err := addUnique(seen, []bundle.Resolved{{Name: "docker.io/library/hello:1.0"}, {Name: "registry.k8s.io/pause:3.10"}}, "apps.yaml")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "registry.k8s.io/pause:3.10 is in both kubernetes.yaml and apps.yaml")
}

func TestBundleLayoutImageNames(t *testing.T) {
	var none *bundleLayout
	assert.Empty(t, none.imageNames(), "no bundles, no names")
	b := &bundleLayout{manifest: &bundle.Manifest{Images: []bundle.ImageRecord{{Name: "a:1"}, {Name: "b:2"}}}}
	assert.Equal(t, []string{"a:1", "b:2"}, b.imageNames())
}

func mustBaseKey(t *testing.T, s *spec.Spec) string {
	t.Helper()
	key, err := rootfs.BaseKey(s.OS, nil, s.Epoch())
	require.NoError(t, err)
	return key
}

// fakeBase fills c with a rootfs base for s's os section (what mmdebstrap
// would make, in miniature): a root tree as a tarball, a fake kernel,
// systemd-boot and busybox, and a module tree in which the spec's modules
// are built in.
func fakeBase(t *testing.T, c *cache.Cache, s *spec.Spec) {
	t.Helper()
	key, err := rootfs.BaseKey(s.OS, nil, s.Epoch())
	require.NoError(t, err)
	_, _, err = c.Fill(context.Background(), rootfs.BaseKind, key, func(_ context.Context, dir string) error {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, d := range []string{"./", "./etc/", "./usr/", "./usr/bin/", "./var/", "./home/"} {
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1, 0)}))
		}
		osRelease := []byte("ID=debian\n")
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "./etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(osRelease)), ModTime: time.Unix(1, 0)}))
		_, err := tw.Write(osRelease)
		require.NoError(t, err)
		require.NoError(t, tw.Close())
		files := map[string]string{
			rootfs.BaseTar:            buf.String(),
			rootfs.BaseKernel:         strings.Repeat("fake kernel ", 1000),
			rootfs.BaseSDBoot:         strings.Repeat("MZ fake systemd-boot ", 100),
			rootfs.BaseBusybox:        strings.Repeat("fake busybox ", 100),
			rootfs.BaseGrubBoot:       strings.Repeat("B", 512),
			rootfs.BaseGrubCore:       strings.Repeat("\x00", 4*512), // no block list yet, as grub-mkimage makes it
			rootfs.BaseGrubBootHybrid: strings.Repeat("H", 512),
			rootfs.BaseGrubCDCore:     strings.Repeat("C", 8*512),
			rootfs.BaseKernelRelease:  "6.12.0-test\n",
			rootfs.BaseVersions:       "systemd 257.9-1\nlinux-image-amd64 6.12.0-test\n",
			filepath.Join(rootfs.BaseModules, "modules.dep"):     "",
			filepath.Join(rootfs.BaseModules, "modules.builtin"): "kernel/drivers/block/virtio_blk.ko\n",
		}
		for name, content := range files {
			p := filepath.Join(dir, name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		}
		return nil
	})
	require.NoError(t, err)
}

// TestRunWithFakeBase runs the whole pipeline but mmdebstrap (the base is
// a small fake in the cache): every output is written, accepted by its
// standard tool, listed with its sha256 in manifest.json, and a second
// build gives the same bytes. The build leaves the process's environment
// alone.
func TestRunWithFakeBase(t *testing.T) {
	for _, tool := range []string{"mksquashfs", "mkfs.fat", "mcopy", "qemu-img", "xorriso", "sgdisk"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "%s not found: run make deps", tool)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "") // t.Setenv restores it; Run must not set it
	require.NoError(t, os.Unsetenv("SOURCE_DATE_EPOCH"))
	s := testSpec(t, "outputs: [raw, qcow2, vmdk, ova, iso]\n")
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	fakeBase(t, c, s)
	progs := t.TempDir()
	in := Inputs{Firstboot: filepath.Join(progs, "firstboot"), Init: filepath.Join(progs, "init")}
	require.NoError(t, os.WriteFile(in.Firstboot, []byte("#!/bin/sh\n# fake firstboot\n"), 0o755))
	require.NoError(t, os.WriteFile(in.Init, []byte("#!/bin/sh\n# fake init\n"), 0o755))

	// An entry no build has used for a month: the second build, bounded
	// to one byte, removes it and keeps every entry it used itself.
	stale := c.Path("slot", strings.Repeat("5", 64))
	require.NoError(t, os.MkdirAll(stale, 0o755))
	require.NoError(t, os.Chtimes(stale, time.Now().Add(-720*time.Hour), time.Now().Add(-720*time.Hour)))

	var outs []string
	var logs []string
	for i := range 2 {
		out := filepath.Join(t.TempDir(), "out")
		var progress bytes.Buffer
		res, err := Run(context.Background(), s, in, Options{OutDir: out, Cache: c, Progress: &progress, CacheMax: int64(i)})
		require.NoError(t, err, "build %d:\n%s", i+1, progress.String())
		_, set := os.LookupEnv("SOURCE_DATE_EPOCH")
		assert.False(t, set, "Run set SOURCE_DATE_EPOCH in the process's environment")
		assert.Contains(t, res.Map, layout.LabelSlotA, "the drawn partition map")
		for _, f := range append(s.Outputs, "sbom") {
			o, ok := res.Manifest.Outputs[f]
			if !assert.True(t, ok, "manifest lists the %s output", f) {
				continue
			}
			sum, size := fileDigest(t, filepath.Join(out, o.File))
			assert.Equal(t, sum, o.SHA256, "%s: manifest sha256", o.File)
			assert.Equal(t, size, o.Size, "%s: manifest size", o.File)
		}
		assert.Len(t, res.Manifest.Partitions, 4, "EFI, BIOS-BOOT and the two slots")
		assert.Equal(t, "6.12.0-test", res.Manifest.Kernel)
		assert.Empty(t, dirEntriesMatching(t, out, ".work-"), "the work directory is removed")
		outs = append(outs, out)
		logs = append(logs, progress.String())
	}
	assert.Contains(t, logs[0], "rootfs base (mmdebstrap)")
	assert.Contains(t, logs[0], fmt.Sprintf("[%d/%d] cache: done", stageCount, stageCount), "stageCount counts the steps")
	assert.Regexp(t, `cache: done in \S+ \(no bound\)`, logs[0])
	assert.Contains(t, logs[1], "removed 1 least recently used", "the bounded build prunes")
	assert.NoDirExists(t, stale)
	_, ok := c.Lookup(rootfs.BaseKind, mustBaseKey(t, s))
	assert.True(t, ok, "an entry the build used stays, over the bound")
	assert.Regexp(t, `slot images \(mksquashfs\).*\(cached\)`, logs[1], "the second build reuses the slot")
	assert.NotRegexp(t, `slot images \(mksquashfs\).*\(cached\)`, logs[0], "the first build makes the slot")

	raw := filepath.Join(outs[0], "unit.raw")
	b, err := exec.Command("sgdisk", "-v", raw).CombinedOutput()
	require.NoError(t, err, "sgdisk -v: %s", b)
	assert.Contains(t, string(b), "No problems found")
	b, err = exec.Command("qemu-img", "check", filepath.Join(outs[0], "unit.qcow2")).CombinedOutput()
	require.NoError(t, err, "qemu-img check: %s", b)
	b, err = exec.Command("xorriso", "-indev", filepath.Join(outs[0], "unit.iso"), "-report_el_torito", "as_mkisofs").CombinedOutput()
	require.NoError(t, err, "xorriso: %s", b)
	assert.Contains(t, string(b), "-e ", "the ISO has an El Torito EFI image")
	assert.Contains(t, string(b), "-b '/"+layout.ISOGrubCore+"'", "and GRUB's, for BIOS")
	assert.Contains(t, string(b), "--grub2-mbr", "with GRUB's hybrid MBR boot code for sticks")
	grubCfg := filepath.Join(t.TempDir(), "grub.cfg")
	b, err = exec.Command("xorriso", "-osirrox", "on", "-indev", filepath.Join(outs[0], "unit.iso"), "-extract", "/"+layout.ISOGrubConfig, grubCfg).CombinedOutput()
	require.NoError(t, err, "the ISO's GRUB menu: %s", b)
	menu, err := os.ReadFile(grubCfg)
	require.NoError(t, err)
	assert.Regexp(t, `set default=terrarium-live\n`, string(menu), "the live system first, as under UEFI")
	assert.Regexp(t, `linux /`+layout.ISOGrubKernel+` .*`+layout.CmdlineLive+` `+layout.CmdlineSlot+`=a\n`, string(menu))
	assert.Contains(t, string(menu), "--id terrarium-install {")

	sbomJSON, err := os.ReadFile(filepath.Join(outs[0], "sbom.cdx.json"))
	require.NoError(t, err)
	assert.Contains(t, string(sbomJSON), "pkg:deb/debian/systemd@257.9-1?arch=amd64&distro=debian-trixie", "the base's packages in the SBOM")
	for _, f := range []string{"unit.raw", "unit.qcow2", "unit.vmdk", "unit.ova", "unit.iso", "sbom.cdx.json", "manifest.json"} {
		one, _ := fileDigest(t, filepath.Join(outs[0], f))
		two, _ := fileDigest(t, filepath.Join(outs[1], f))
		assert.Equal(t, one, two, "%s differs between two builds of the same inputs", f)
	}
}

// fileDigest is the sha256 (hex) and size of the file at p, streamed: the
// outputs are hundreds of MiB, which the race detector's shadow memory
// makes slow to hold whole.
func fileDigest(t *testing.T, p string) (string, int64) {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil)), n
}

func dirEntriesMatching(t *testing.T, dir, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}
