package qemutests

import (
	"context"
	"fmt"
	"regexp"
	"sort"
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
func BenchmarkBootToProvisioned(b *testing.B) {
	image := fixture(b, "TERRARIUM_IMAGE")
	var runs [][]time.Duration
	for i := 0; i < b.N; i++ {
		runs = append(runs, bootOnce(b, image))
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i][len(runs[i])-1] < runs[j][len(runs[j])-1] })
	med := runs[len(runs)/2]
	b.ReportMetric(med[len(med)-1].Seconds(), "s-to-provisioned")
	b.ReportMetric(med[1].Seconds(), "s-to-switch-root")
	b.ReportMetric(0, "ns/op")
	b.Logf("median of %d boots:\n%s", len(runs), drawTimeline(med))
}

func bootOnce(b *testing.B, image string) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	m := newMachine(b, image)
	cfg := m.configDisk("config.img", goodConfig)
	start := time.Now()
	vm := m.boot(ctx, configAttached(cfg))
	var at []time.Duration
	for _, ms := range milestones {
		if _, err := vm.Expect(ctx, regexp.MustCompile(ms.pattern)); err != nil {
			b.Fatalf("waiting for %s: %v", ms.name, err)
		}
		at = append(at, time.Since(start))
	}
	vm.Close()
	return at
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
