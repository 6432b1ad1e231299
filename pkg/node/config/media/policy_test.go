package media

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		fs          Filesystem
		read, write bool
	}{
		{VFAT, true, true},
		{ExFAT, true, true},
		{ISO9660, true, false},
		{Ext2, false, false},
		{Ext3, false, false},
		{Ext4, false, false},
		{Btrfs, false, false},
		{XFS, false, false},
		{NTFS, false, false},
		{F2FS, false, false},
		{Squashfs, false, false},
		{LUKS, false, false},
		{Unknown, false, false},
	} {
		t.Run(tc.fs.String(), func(t *testing.T) {
			assert.Equal(t, tc.read, Allowed(tc.fs, Read), "read")
			assert.Equal(t, tc.write, Allowed(tc.fs, Write), "written")
		})
	}
}

// Every medium is mounted without devices, programs or set-uid bits, and
// read-only unless the job writes it.
func TestMountFlags(t *testing.T) {
	assert.Equal(t, uintptr(unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOSUID), MountFlags(Read))
	assert.Equal(t, uintptr(unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOSUID), MountFlags(Write))
}

// TestMountRefuses: a medium whose filesystem the policy does not allow
// for the job is refused by name before the kernel is asked to mount it
// (these run unprivileged: a mount would fail with EPERM, not this).
func TestMountRefuses(t *testing.T) {
	const fix = "format the stick FAT32 on another machine (this erases it): "
	for _, tc := range []struct {
		name  string
		data  []byte
		label string
		a     Access
		want  string
	}{{
		name: "an ext4 support stick", data: extSuperblock(extCompatHasJournal, extIncompatExtents), label: "TERRA-SUPPORT", a: Write,
		want: "the stick /dev/sdb1 (TERRA-SUPPORT) holds an ext4 filesystem; the node writes only FAT or exFAT sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			fix + "mkfs.vfat -F 32 -n TERRA-SUPPO /dev/sdX1 (or exFAT for files over 4 GiB: mkfs.exfat -L TERRA-SUPPO /dev/sdX1)",
	}, {
		name: "an ext4 backup stick, by its FAT label", data: extSuperblock(0, extIncompatExtents), label: "TERRA-BACKU", a: Write,
		want: "the stick /dev/sdb1 (TERRA-BACKU) holds an ext4 filesystem; the node writes only FAT or exFAT sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			fix + "mkfs.vfat -F 32 -n TERRA-BACKU /dev/sdX1 (or exFAT for files over 4 GiB: mkfs.exfat -L TERRA-BACKU /dev/sdX1)",
	}, {
		name: "an ISO 9660 backup stick to write", data: signature(0x8800, 0x8000, "\x01CD001\x01"), label: "TERRA-BACKUP", a: Write,
		want: "the stick /dev/sdb1 (TERRA-BACKUP) holds an ISO 9660 filesystem; the node writes only FAT or exFAT sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			fix + "mkfs.vfat -F 32 -n TERRA-BACKU /dev/sdX1 (or exFAT for files over 4 GiB: mkfs.exfat -L TERRA-BACKU /dev/sdX1)",
	}, {
		name: "a btrfs upgrade stick", data: signature(probeSize, 0x10040, "_BHRfS_M"), label: "TERRA-UPGRADE", a: Read,
		want: "the stick /dev/sdb1 (TERRA-UPGRADE) holds a btrfs filesystem; the node reads only FAT, exFAT or ISO 9660 sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			fix + "mkfs.vfat -F 32 -n TERRA-UPGRA /dev/sdX1 (or exFAT for files over 4 GiB: mkfs.exfat -L TERRA-UPGRA /dev/sdX1)",
	}, {
		name: "an XFS disk for `firstboot upgrade`", data: signature(4096, 0, "XFSB"), label: "firstboot upgrade", a: Read,
		want: "the stick /dev/sdb1 (firstboot upgrade) holds an XFS filesystem; the node reads only FAT, exFAT or ISO 9660 sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			fix + "mkfs.vfat -F 32 /dev/sdX1 (or exFAT for files over 4 GiB: mkfs.exfat /dev/sdX1)",
	}, {
		name: "an ext4 bundle disk", data: extSuperblock(0, extIncompatExtents), label: "TERRA-BUNDLE", a: Read,
		want: "the stick /dev/sdb1 (TERRA-BUNDLE) holds an ext4 filesystem; the node reads only FAT, exFAT or ISO 9660 sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			"write the disk again with `imagebuild bundle disk` (FAT32) and copy it to the stick",
	}, {
		name: "a blank stick", data: make([]byte, 1<<20), label: "TERRA-SUPPO", a: Write,
		want: "the stick /dev/sdb1 (TERRA-SUPPO) holds no filesystem the node knows; the node writes only FAT or exFAT sticks, so that its kernel never parses another filesystem made by whoever holds the stick: " +
			fix + "mkfs.vfat -F 32 -n TERRA-SUPPO /dev/sdX1 (or exFAT for files over 4 GiB: mkfs.exfat -L TERRA-SUPPO /dev/sdX1)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := filepath.Join(t.TempDir(), "sdb1")
			require.NoError(t, os.WriteFile(dev, tc.data, 0o600))
			m := Medium{Device: "/dev/sdb1", Label: tc.label}
			got, err := Mount(dev, m, t.TempDir(), tc.a)
			require.ErrorIs(t, err, ErrFilesystemRefused)
			assert.EqualError(t, err, tc.want)
			var refused *RefusedError
			require.ErrorAs(t, err, &refused)
			assert.Equal(t, got, refused.Found)
			assert.Equal(t, m, refused.Medium)
		})
	}
}

func TestMountMissingDevice(t *testing.T) {
	_, err := Mount(filepath.Join(t.TempDir(), "sdb1"), Medium{Device: "/dev/sdb1", Label: "TERRA-SUPPORT"}, t.TempDir(), Write)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "the stick /dev/sdb1 (TERRA-SUPPORT): ")
}

// TestUseRefusesExt4: the job never runs on a stick the policy refuses,
// and nothing is mounted.
func TestUseRefusesExt4(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	b := &Block{Host: h, Dir: "/run/terrarium/media"}
	require.NoError(t, os.MkdirAll(h.Path("/dev"), 0o755))
	require.NoError(t, os.WriteFile(h.Path("/dev/sdb1"), extSuperblock(extCompatHasJournal, extIncompatExtents), 0o600))
	for _, writable := range []bool{true, false} {
		ran := false
		err := b.Use(context.Background(), Medium{Device: "/dev/sdb1", Label: "TERRA-BACKUP"}, writable, func(string) error {
			ran = true
			return nil
		})
		require.ErrorIs(t, err, ErrFilesystemRefused)
		assert.ErrorContains(t, err, "the stick /dev/sdb1 (TERRA-BACKUP) holds an ext4 filesystem")
		assert.False(t, ran, "the job ran on a refused stick")
	}
}

func TestUseCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := &Block{Host: &host.Host{Root: t.TempDir()}, Dir: "/run/terrarium/media"}
	err := b.Use(ctx, Medium{Device: "/dev/sdb1", Label: "TERRA-SUPPORT"}, true, func(string) error { return nil })
	assert.ErrorIs(t, err, context.Canceled)
}
