package qemutests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestFallbackToSlotA: slot B is preferred but broken (its health check
// fails), so its boots are never blessed; each failed trial reboots, and
// after the configured two tries systemd-boot falls back to slot A, which
// is healthy and gets blessed.
func TestFallbackToSlotA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*bootTimeout)
	defer cancel()
	bin := fixture(t, "TERRARIUM_BIN")
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "build", "--spec", "testdata/broken-b.yaml", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build broken-b image: %v\n%s", err, b)
	}
	m := newMachine(t, filepath.Join(out, "broken-b.qcow2"))
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
}
