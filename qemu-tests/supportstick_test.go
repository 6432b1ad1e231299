package qemutests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// supportBundle is what a node wrote to a TERRA-SUPPORT stick.
type supportBundle struct {
	name    string            // terrarium-support-….tar.gz
	members map[string][]byte // by the name in the archive
	stick   *volume.Volume    // the stick's image, open
}

// writeSupportStick inserts an empty FAT stick labelled TERRA-SUPPORT
// into vm over USB, waits for the node to say it wrote its bundle, pulls
// the stick and reads the archive from the stick's image.
func writeSupportStick(ctx context.Context, t *testing.T, vm *qemu.VM, img string) supportBundle {
	t.Helper()
	d, err := diskfs.Create(img, 64<<20, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat32, VolumeLabel: "TERRA-SUPPO"})
	require.NoError(t, err)
	require.NoError(t, d.Close())

	require.NoError(t, vm.HotplugDisk(ctx, qemu.Disk{ID: "support", Path: img, Format: "raw", Bus: qemu.BusUSB}))
	m, err := vm.Expect(ctx, regexp.MustCompile(`support: wrote (terrarium-support-\S+\.tar\.gz): (\d+) files, (\d+) redactions to the TERRA-SUPPORT stick; it may be removed`))
	require.NoError(t, err, "no support bundle written to the stick")
	require.NoError(t, vm.UnplugDisk(ctx, "support"))
	t.Logf("support bundle %s: %s files, %s redactions", m[1], m[2], m[3])

	v, err := volume.Open(img)
	require.NoError(t, err)
	t.Cleanup(func() { _ = v.Close() })
	data, err := v.ReadFile(m[1], 256<<20)
	require.NoError(t, err)
	b := supportBundle{name: m[1], members: map[string][]byte{}, stick: v}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		b.members[h.Name] = body
	}
	return b
}

// has is whether the archive holds a member whose name ends in suffix.
func (b supportBundle) has(suffix string) bool {
	for n := range b.members {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return false
}

// checkStickService: the sticks a node writes to are mounted by the stick
// service, not by firstboot. An ext4 TERRA-SUPPORT stick is refused by
// name with nothing written; a FAT one receives the node's support
// bundle, written through the service's sandboxed instances (their
// runs in the node's journal), and nothing of it stays mounted.
func checkStickService(ctx context.Context, t *testing.T, vm *qemu.VM, admin *sshClient, work string) {
	t.Helper()
	ext4 := filepath.Join(work, "support-ext4.img")
	require.NoError(t, os.WriteFile(ext4, nil, 0o600))
	require.NoError(t, os.Truncate(ext4, 32<<20))
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "TERRA-SUPPORT", ext4).CombinedOutput()
	require.NoError(t, err, "mkfs.ext4: %s", out)
	require.NoError(t, vm.HotplugDisk(ctx, qemu.Disk{ID: "support", Path: ext4, Format: "raw", Bus: qemu.BusUSB}))
	refused, err := vm.Expect(ctx, regexp.MustCompile(`support: no bundle written to (/dev/\S+): the stick (/dev/\S+) \(TERRA-SUPPORT\) holds an ext4 filesystem; the node writes only FAT or exFAT sticks`))
	require.NoError(t, err, "the ext4 stick was not refused by name")
	t.Logf("ext4 stick refused: %s", refused[0])
	require.NoError(t, vm.UnplugDisk(ctx, "support"))

	b := writeSupportStick(ctx, t, vm, filepath.Join(work, "support.img"))
	for _, want := range []string{"/index.txt", "/node/status.json", "/node/journal.json"} {
		assert.True(t, b.has(want), "the bundle %s has no %s", b.name, want)
	}

	// Two instances of the stick service ran, one for each stick: the
	// ext4 stick's refused it, the FAT stick's mounted, handed over and
	// released it; none is left running. systemd logs an instance's end
	// after it has answered: wait for it.
	var log string
	ended := func() bool {
		log, err = admin.read("sudo journalctl --no-pager -o cat -u 'terrarium-stick@*'")
		return err == nil && strings.Contains(log, "Deactivated successfully") && strings.Contains(log, "Failed with result 'exit-code'")
	}
	require.Eventually(t, ended, time.Minute, time.Second, "the stick service's instances did not both end:\n%s", log)
	instances := map[string]bool{}
	for _, m := range regexp.MustCompile(`terrarium-stick@(\S+)\.service`).FindAllStringSubmatch(log, -1) {
		instances[m[1]] = true
	}
	assert.Len(t, instances, 2, "the stick service ran once per stick:\n%s", log)
	assert.Contains(t, log, "holds an ext4 filesystem", "the refusal is in the service's log")
	active, err := admin.read("systemctl list-units --no-legend --plain --state=active 'terrarium-stick@*'")
	require.NoError(t, err, active)
	assert.Empty(t, strings.TrimSpace(active), "an instance of the stick service is still running")
	mounts, err := admin.read("sudo cat /proc/1/mountinfo /proc/$(systemctl show -p MainPID --value terrarium-firstboot.service)/mountinfo")
	require.NoError(t, err, mounts)
	assert.NotRegexp(t, ` - (vfat|exfat|ext4) /dev/sd`, mounts, "a stick is mounted on the host or in firstboot")
}
