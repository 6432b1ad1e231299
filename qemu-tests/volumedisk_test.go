//go:build e2e

package qemutests

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// TestVolumeDiskInitNode: an init node with a TPM, whose TERRA-STATE is
// therefore encrypted, and whose config makes a whole second disk its
// volume area (cluster.localStorage.disk). On first boot the node makes
// the empty disk a LUKS2 volume whose key is on TERRA-STATE, formats the
// area inside and mounts it before its kubelet starts; the disk then
// holds no file name of the area in the clear. After a power cut systemd
// opens and mounts it again at boot, from the unit and the drop-in
// firstboot wrote, so the node verifies without healing its volume area.
func TestVolumeDiskInitNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	config, _ := soloInitConfig(ctx, t, "e2e-disk")
	const serial = "TERRA-DATA-CP1"
	config = withVolumeDisk(t, config, serial)

	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	m.asSoloInit()
	m.tpm = true
	dataDisk := filepath.Join(m.dir, "data.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", dataDisk, "1G").CombinedOutput()
	require.NoError(t, err, "qemu-img create: %s", out)
	data := qemu.Disk{ID: "data", Path: dataDisk, Format: "qcow2", Serial: serial}

	start := time.Now()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", config)), data)
	made := expect(ctx, t, vm, `volume area: applied: (\d+) MiB, the whole disk (/dev/vd[a-z]) \(1\.0 GiB, serial `+serial+`\), encrypted \(LUKS2, its key on TERRA-STATE\)`)
	t.Logf("volume area: %s MiB, the whole disk %s, %s after power-on", made[1], made[2], time.Since(start).Round(time.Second))
	_, err = vm.Expect(ctx, healthyRE)
	require.NoError(t, err, "the node did not form its cluster")
	t.Logf("healthy %s after power-on", time.Since(start).Round(time.Second))

	cutPower(ctx, t, vm)
	start = time.Now()
	vm = m.boot(ctx, data)
	_, err = vm.Expect(ctx, healthyRE)
	require.NoError(t, err, "the node did not come back after the power cut")
	t.Logf("healthy again %s after power-on", time.Since(start).Round(time.Second))
	console := vm.Console()
	assert.NotRegexp(t, regexp.MustCompile(`local-volumes drifted`), console, "systemd mounted the disk at boot; firstboot had nothing to heal")
	assert.NotContains(t, console, "volume area: applied", "the disk is formatted once")
	require.NoError(t, vm.Quit(ctx))
	// The area's root marker, a file name in its ext4 directory, is on
	// the disk only encrypted.
	assert.False(t, fileContains(t, dataDisk, []byte(".terrarium-volume-area")), "the volume area's directory is on the disk in the clear")
}
