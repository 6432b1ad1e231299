package qemutests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// TestStateOnItsOwnDisk: a VM made from the image as a template has an OS
// disk of the image's size, with no room for TERRA-STATE, and an empty
// second disk: TERRA-STATE goes on that disk and the node provisions. The
// OS disk swapped for a fresh one from the image (an image swap: what a
// vSphere or OpenStack admin does with a new version's template), the node
// boots enrolled from the state disk, with no config disk attached.
func TestStateOnItsOwnDisk(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootTimeout)
	defer cancel()
	image := fixture(t, "TERRARIUM_IMAGE")
	m := newMachine(t, image)
	osDisk := func() {
		require.NoError(t, os.Remove(m.disk))
		// No size: the image's own, as a template's disk is.
		out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", image, m.disk).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	osDisk()
	stateImg := filepath.Join(m.dir, "state.qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", stateImg, "4G").CombinedOutput()
	require.NoError(t, err, "%s", out)
	state := qemu.Disk{ID: "state", Path: stateImg, Format: "qcow2"}

	vm := m.boot(ctx, configAttached(m.configDisk("config.img", goodConfig)), state)
	expect(ctx, t, vm, `terrarium-init: /dev/vd[a-z] is empty: it takes TERRA-STATE`)
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	require.NoError(t, vm.Quit(ctx))

	osDisk() // the image swap
	vm = m.boot(ctx, state)
	expect(ctx, t, vm, `terrarium-init: TERRA-STATE on a disk of its own: /dev/vd[a-z]`)
	s = expectStatus(ctx, t, vm, "verified", "provisioned", "failed", "waiting-for-config")
	require.Equal(t, "verified", s.State, "the node keeps its enrollment across the swap: %+v", s)
	require.Equal(t, "node-1", s.Hostname)
	require.Equal(t, 2, s.Boot)
}
