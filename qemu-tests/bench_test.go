package qemutests

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// milestones of a first boot, in console order.
var milestones = []struct{ name, pattern string }{
	{"firmware+kernel", `terrarium-init: mount /proc`},
	{"initramfs", `terrarium-init: switching root`},
	{"systemd→firstboot", `terrarium: Terrarium \S+, slot a, boot 1`},
	{"provisioned", `terrarium-status: \{[^\n]*"state":"provisioned"`},
}

// BenchmarkBootToProvisioned measures seconds from QEMU start to firstboot
// reporting "provisioned" under TCG, split by phase, and draws the
// timeline of the median run. Run with -benchtime=3x for a median of 3.
// It also reports the CPU time QEMU used for the boot (both vCPU threads
// and QEMU's own): what a boot costs the host.
//
// TERRARIUM_BASELINE_IMAGE (another build, such as the previous commit's)
// boots in turn with TERRARIUM_IMAGE, one of each per iteration: the
// host's speed drifts by tens of percent within an hour, and alternating
// spreads the drift over both. Both medians and their ratios are reported.
func BenchmarkBootToProvisioned(b *testing.B) {
	image := fixture(b, "TERRARIUM_IMAGE")
	baseline := os.Getenv("TERRARIUM_BASELINE_IMAGE")
	var runs, base []boot
	for i := 0; i < b.N; i++ {
		if baseline != "" {
			base = append(base, bootOnce(b, baseline, false))
		}
		runs = append(runs, bootOnce(b, image, false))
	}
	med := medianBoot(b, "image", runs)
	b.ReportMetric(med.total().Seconds(), "s-to-provisioned")
	b.ReportMetric(med.at[1].Seconds(), "s-to-switch-root")
	b.ReportMetric(med.cpu.Seconds(), "cpu-s-to-provisioned")
	b.ReportMetric(0, "ns/op")
	b.Logf("median of %d boots:\n%s", len(runs), drawTimeline(med.at))
	if baseline != "" {
		bmed := medianBoot(b, "baseline", base)
		b.ReportMetric(bmed.total().Seconds(), "baseline-s-to-provisioned")
		b.ReportMetric(bmed.cpu.Seconds(), "baseline-cpu-s-to-provisioned")
		b.ReportMetric(med.total().Seconds()/bmed.total().Seconds(), "wall-ratio")
		b.ReportMetric(med.cpu.Seconds()/bmed.cpu.Seconds(), "cpu-ratio")
		b.Logf("baseline %s, median of %d boots:\n%s", baseline, len(base), drawTimeline(bmed.at))
	}
}

// BenchmarkFirmwareBoot boots the same image to "provisioned" under OVMF
// and under SeaBIOS (GRUB, from the same loader entries), one of each per
// iteration, taking turns at going first, and reports both medians and
// their ratio: what a plant PC with a legacy BIOS, Proxmox's default or a
// Nova instance without hw_firmware_type pays against UEFI. Run with
// -benchtime=3x for medians of 3 (make bench-firmware).
func BenchmarkFirmwareBoot(b *testing.B) {
	image := fixture(b, "TERRARIUM_IMAGE")
	boots := map[bool][]boot{} // by bios
	for i := 0; i < b.N; i++ {
		for _, bios := range []bool{i%2 == 1, i%2 == 0} {
			boots[bios] = append(boots[bios], bootOnce(b, image, bios))
		}
	}
	uefi, bios := boots[false], boots[true]
	umed, bmed := medianBoot(b, "OVMF", uefi), medianBoot(b, "SeaBIOS", bios)
	b.ReportMetric(umed.total().Seconds(), "ovmf-s-to-provisioned")
	b.ReportMetric(bmed.total().Seconds(), "seabios-s-to-provisioned")
	b.ReportMetric(umed.at[0].Seconds(), "ovmf-s-to-initramfs")
	b.ReportMetric(bmed.at[0].Seconds(), "seabios-s-to-initramfs")
	b.ReportMetric(bmed.total().Seconds()/umed.total().Seconds(), "seabios/ovmf")
	b.ReportMetric(bmed.cpu.Seconds()/umed.cpu.Seconds(), "cpu-ratio")
	b.ReportMetric(0, "ns/op")
	b.Logf("OVMF, median of %d boots:\n%s", len(uefi), drawTimeline(umed.at))
	b.Logf("SeaBIOS, median of %d boots:\n%s", len(bios), drawTimeline(bmed.at))
}

// medianBoot logs every boot of runs and returns their median: the
// median boot's milestones, and the median CPU time.
func medianBoot(b *testing.B, what string, runs []boot) boot {
	cpus := make([]time.Duration, len(runs))
	for i, r := range runs {
		b.Logf("%s boot %d: provisioned at %.1f s, QEMU's CPU %.1f s", what, i+1, r.total().Seconds(), r.cpu.Seconds())
		cpus[i] = r.cpu
	}
	slices.Sort(cpus)
	sorted := slices.SortedFunc(slices.Values(runs), func(x, y boot) int { return cmp.Compare(x.total(), y.total()) })
	med := sorted[len(sorted)/2]
	med.cpu = cpus[len(cpus)/2]
	return med
}

// boot is one boot's milestones (time since QEMU started) and the CPU
// time QEMU used up to the last.
type boot struct {
	at  []time.Duration
	cpu time.Duration
}

func (r boot) total() time.Duration { return r.at[len(r.at)-1] }

// bootOnce boots image under OVMF, or under SeaBIOS if bios, to
// "provisioned".
func bootOnce(b *testing.B, image string, bios bool) boot {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	m := newMachine(b, image)
	m.bios = bios
	cfg := m.configDisk("config.img", goodConfig)
	start := time.Now()
	vm := m.boot(ctx, configAttached(cfg))
	var r boot
	for _, ms := range milestones {
		if _, err := vm.Expect(ctx, regexp.MustCompile(ms.pattern)); err != nil {
			b.Fatalf("waiting for %s: %v", ms.name, err)
		}
		r.at = append(r.at, time.Since(start))
	}
	if err := vm.Close(); err != nil {
		b.Fatal(err)
	}
	ps := vm.ProcessState()
	if ps == nil {
		b.Fatal("QEMU's process state is unknown after Close")
	}
	r.cpu = ps.UserTime() + ps.SystemTime()
	return r
}

func drawTimeline(at []time.Duration) string {
	const width = 60
	total := at[len(at)-1]
	var s strings.Builder
	prev := time.Duration(0)
	for i, ms := range milestones {
		from := int(prev * width / total)
		to := max(int(at[i]*width/total), from+1)
		fmt.Fprintf(&s, "  %-18s %s%s%s %5.1fs (+%.1fs)\n", ms.name, strings.Repeat(" ", from), strings.Repeat("█", to-from), strings.Repeat(" ", width-to), at[i].Seconds(), (at[i] - prev).Seconds())
		prev = at[i]
	}
	return s.String()
}
