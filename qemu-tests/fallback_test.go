package qemutests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// TestFallbackToSlotA: slot B is preferred and on trial (two tries) but
// fails, so its boots are never blessed; each failed try reboots, and once
// both are spent systemd-boot falls back to slot A, which is healthy and
// gets blessed. Slot B fails two ways: its health check (a build with the
// "health" fault), and its squashfs damaged, so that the initramfs cannot
// even mount it.
func TestFallbackToSlotA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*bootTimeout)
	defer cancel()
	bin := fixture(t, "TERRARIUM_BIN")
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "build", "--spec", "testdata/broken-b.yaml", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build broken-b image: %v\n%s", err, b)
	}
	image := filepath.Join(out, "broken-b.qcow2")

	t.Run("unhealthy", func(t *testing.T) {
		m := newMachine(t, image)
		vm := m.boot(ctx, configAttached(m.configDisk("config.img", goodConfig)))
		for try := 1; try <= 2; try++ {
			expect(ctx, t, vm, fmt.Sprintf(`terrarium: Terrarium 0\.1\.0, slot b, boot %d`, try))
			expect(ctx, t, vm, `rebooting in 10s so the boot loader counts the failed try`)
			s := expectStatus(ctx, t, vm, "provisioned", "verified", "failed")
			if s.Slot != "b" || s.Healthy == nil || *s.Healthy || s.Blessed != "not blessed" {
				t.Fatalf("try %d on slot B: %+v, want unhealthy and not blessed", try, s)
			}
		}
		start := time.Now()
		expect(ctx, t, vm, `terrarium: Terrarium 0\.1\.0, slot a, boot 3`)
		s := expectStatus(ctx, t, vm, "provisioned", "verified", "failed")
		if s.Slot != "a" || s.Healthy == nil || !*s.Healthy || s.Blessed != "blessed" {
			t.Fatalf("after fallback: %+v, want slot a healthy and blessed", s)
		}
		t.Logf("fell back to slot A; its boot took %s", time.Since(start).Round(time.Second))
	})

	t.Run("damaged", func(t *testing.T) {
		m := newMachine(t, image)
		// Zeros over the start of slot B's squashfs: its superblock.
		offset := m.partitionOffset(layout.LabelSlotB)
		if b, err := exec.Command("qemu-io", "-f", "qcow2", "-c", fmt.Sprintf("write -z %d 1M", offset), m.disk).CombinedOutput(); err != nil {
			t.Fatalf("qemu-io: %v\n%s", err, b)
		}
		start := time.Now()
		vm := m.boot(ctx, configAttached(m.configDisk("config.img", goodConfig)))
		for try := 1; try <= 2; try++ {
			expect(ctx, t, vm, `terrarium-init: FAILED: mount the slot: mount /dev/vda3 \(TERRA-B\) as squashfs`)
			expect(ctx, t, vm, `terrarium-init: slot b failed on a trial boot: rebooting in 10s so the boot loader counts the failed try`)
		}
		expect(ctx, t, vm, `terrarium: Terrarium 0\.1\.0, slot a, boot 1`)
		s := expectStatus(ctx, t, vm, "provisioned", "verified", "failed")
		if s.Slot != "a" || s.Healthy == nil || !*s.Healthy || s.Blessed != "blessed" {
			t.Fatalf("after fallback: %+v, want slot a healthy and blessed", s)
		}
		if strings.Contains(vm.Console(), "rescue shell") {
			t.Error("a failed trial boot opened the rescue shell")
		}
		t.Logf("a damaged slot B fell back to slot A, provisioned %s after power-on", time.Since(start).Round(time.Second))
	})
}
