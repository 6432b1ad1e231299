//go:build e2e

package qemutests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// brokenBTries is boot.tries of testdata/broken-b.yaml. One try keeps the
// case short; the counting itself (tries left and done) is unit-tested in
// pkg/node/boot/bootloader and pkg/image/esp.
const brokenBTries = 1

// TestFallbackToSlotA: slot B is preferred and on trial but fails, so its
// boots are never blessed; each failed try reboots, and once its tries are
// spent systemd-boot (under SeaBIOS: GRUB, from the same entries) falls
// back to slot A, which is healthy and gets blessed. Slot B fails two ways: its health check (a build with the
// "health" fault), and its squashfs damaged, so that the initramfs cannot
// even mount it.
func TestFallbackToSlotA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*bootTimeout)
	defer cancel()
	bin := fixture(t, "TERRARIUM_BIN")
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "build", "--spec", "testdata/broken-b.yaml", "--out", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "build broken-b image: %s", b)
	image := filepath.Join(out, "broken-b.qcow2")

	unhealthy := func(t *testing.T, bios bool) {
		m := newMachine(t, image)
		m.bios = bios
		vm := m.boot(ctx, configAttached(m.configDisk("config.img", goodConfig)))
		if bios {
			// GRUB boots slot B, the preferred, on trial; the
			// initramfs counts GRUB's try in the entry's name.
			expect(ctx, t, vm, `Terrarium: slot a trial \(terrarium-a\+1\.conf\), slot b trial \(terrarium-b\+1\.conf\): booting slot b`)
			expect(ctx, t, vm, `boot counting: slot b: 1 try by GRUB counted: terrarium-b\+1\.conf is now terrarium-b\+0-1\.conf`)
		}
		for try := 1; try <= brokenBTries; try++ {
			expect(ctx, t, vm, fmt.Sprintf(`terrarium: Terrarium 0\.1\.0, slot b, boot %d`, try))
			expect(ctx, t, vm, `rebooting in 10s so the boot loader counts the failed try`)
			s := expectStatus(ctx, t, vm, "provisioned", "verified", "failed")
			assert.Equal(t, "b", s.Slot, "try %d", try)
			require.NotNil(t, s.Healthy, "try %d on slot B: %+v", try, s)
			assert.False(t, *s.Healthy, "try %d on slot B: %+v", try, s)
			assert.Equal(t, "not blessed", s.Blessed, "try %d on slot B", try)
		}
		start := time.Now()
		expect(ctx, t, vm, fmt.Sprintf(`terrarium: Terrarium 0\.1\.0, slot a, boot %d`, brokenBTries+1))
		s := expectStatus(ctx, t, vm, "provisioned", "verified", "failed")
		assert.Equal(t, "a", s.Slot, "after fallback: %+v", s)
		require.NotNil(t, s.Healthy, "after fallback: %+v", s)
		assert.True(t, *s.Healthy, "after fallback: %+v", s)
		assert.Equal(t, "blessed", s.Blessed, "after fallback")
		if bios {
			assert.Contains(t, vm.Console(), "slot b spent (terrarium-b+0-1.conf): booting slot a", "GRUB fell back by the entries")
		}
		t.Logf("fell back to slot A; its boot took %s", time.Since(start).Round(time.Second))
	}
	t.Run("unhealthy", func(t *testing.T) { unhealthy(t, false) })
	t.Run("unhealthy under BIOS", func(t *testing.T) { unhealthy(t, true) })

	t.Run("damaged", func(t *testing.T) {
		m := newMachine(t, image)
		// Zeros over the start of slot B's squashfs: its superblock.
		offset := m.partitionOffset(layout.LabelSlotB)
		b, err := exec.Command("qemu-io", "-f", "qcow2", "-c", fmt.Sprintf("write -z %d 1M", offset), m.disk).CombinedOutput()
		require.NoError(t, err, "qemu-io: %s", b)
		start := time.Now()
		vm := m.boot(ctx, configAttached(m.configDisk("config.img", goodConfig)))
		for try := 1; try <= brokenBTries; try++ {
			expect(ctx, t, vm, `terrarium-init: FAILED: mount the slot: mount /dev/vda4 \(TERRA-B\) as squashfs`)
			expect(ctx, t, vm, `terrarium-init: slot b failed on a trial boot: rebooting in 10s so the boot loader counts the failed try`)
		}
		expect(ctx, t, vm, `terrarium: Terrarium 0\.1\.0, slot a, boot 1`)
		s := expectStatus(ctx, t, vm, "provisioned", "verified", "failed")
		assert.Equal(t, "a", s.Slot, "after fallback: %+v", s)
		require.NotNil(t, s.Healthy, "after fallback: %+v", s)
		assert.True(t, *s.Healthy, "after fallback: %+v", s)
		assert.Equal(t, "blessed", s.Blessed, "after fallback")
		assert.NotContains(t, vm.Console(), "rescue shell", "a failed trial boot opened the rescue shell")
		t.Logf("a damaged slot B fell back to slot A, provisioned %s after power-on", time.Since(start).Round(time.Second))
	})
}
