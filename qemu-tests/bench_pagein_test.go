//go:build e2e

package qemutests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/squashfs"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// pageInRounds is how many cold reads of each kind the benchmark times per
// compressor; it reports their medians.
const pageInRounds = 5

// TestSlotPageIn (make bench-pagein) measures what paging in the node's
// programs costs under TCG with the slots' compressor (lz4) against the
// one before it (zstd): the image's own /usr/bin, out of its slot, made
// into one squashfs of each, both attached to one VM and read in turn with
// the page cache dropped before each read. Two figures each: every
// program read whole (cat), and the kubelet's cold start (`kubelet
// --version`: the pages a Go program's start touches). The node itself
// boots from the image's slot; the two test images are plain disks beside
// it.
func TestSlotPageIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	image := fixture(t, "TERRARIUM_IMAGE")
	key := newSSHKey(t)
	m := newMachine(t, image)
	tree := slotDir(t, m, "usr/bin")

	dir := t.TempDir()
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	comps := []squashfs.Compression{squashfs.LZ4, squashfs.ZSTD}
	var disks []qemu.Disk
	size := map[squashfs.Compression]int64{}
	for _, c := range comps {
		p := filepath.Join(dir, string(c)+".squashfs")
		require.NoError(t, squashfs.MakeCompressed(ctx, tree, p, epoch, c), "make the %s squashfs", c)
		fi, err := os.Stat(p)
		require.NoError(t, err)
		size[c] = fi.Size()
		disks = append(disks, qemu.Disk{ID: "sq" + string(c), Path: p, Format: "raw", ReadOnly: true, Serial: "pagein-" + string(c)})
	}

	m.mac, m.memMiB = "52:54:00:00:00:10", 3072
	port := m.forwardSSH()
	cfg := m.configDisk("config.img", plainConfig("pagein", key.authorized, "52:54:00:00:00:10", "52:54:00:77:00:10", "10.77.0.10/24"))
	vm := m.boot(ctx, append([]qemu.Disk{configAttached(cfg)}, disks...)...)
	expectStatus(ctx, t, vm, "provisioned")
	ssh := dialSSH(ctx, t, port, key)

	out, err := ssh.sudoTry(pageInScript(comps, pageInRounds))
	require.NoError(t, err, "the page-in script:\n%s", out)
	got := parsePageIn(out)

	var b strings.Builder
	fmt.Fprintf(&b, "Cold reads of the image's /usr/bin from a squashfs (128 KiB blocks), medians of %d, in one VM under TCG\n\n", pageInRounds)
	fmt.Fprintf(&b, "| | %s | %s | %s / %s |\n|---|---|---|---|\n", comps[0], comps[1], comps[0], comps[1])
	fmt.Fprintf(&b, "| squashfs size | %.1f MiB | %.1f MiB | %.2f |\n", mib(size[comps[0]]), mib(size[comps[1]]), float64(size[comps[0]])/float64(size[comps[1]]))
	for _, row := range []struct{ what, kind, label string }{
		{"all", "real", "every program read (cat), real s"},
		{"all", "sys", "every program read (cat), kernel (sys) s"},
		{"kubelet", "real", "`kubelet --version` cold, real s"},
		{"kubelet", "sys", "`kubelet --version` cold, kernel (sys) s"},
	} {
		a, z := got[key3(comps[0], row.what, row.kind)], got[key3(comps[1], row.what, row.kind)]
		require.Len(t, a, pageInRounds, "%s %s %s readings in:\n%s", comps[0], row.what, row.kind, out)
		require.Len(t, z, pageInRounds, "%s %s %s readings in:\n%s", comps[1], row.what, row.kind, out)
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", row.label, median(a), median(z), median(a)/median(z))
	}
	writeFigure(t, "pagein.txt", b.String())

	// The premise of the slots' compressor: reading the programs costs
	// the kernel less with it than with the one it replaced.
	assert.Less(t, median(got[key3(squashfs.LZ4, "all", "sys")]), median(got[key3(squashfs.ZSTD, "all", "sys")]),
		"lz4 is meant to cost the kernel less than zstd to page in the programs")
}

func mib(n int64) float64 { return float64(n) / float64(layout.MiB) }

// key3 names a series of readings: a compressor, what was read ("all",
// "kubelet") and which time ("real", "sys").
func key3(c squashfs.Compression, what, kind string) string {
	return string(c) + " " + what + " " + kind
}

// pageInScript mounts each test squashfs by its disk's serial and reads it
// rounds times, the compressors' order alternating, the page cache dropped
// before each read (cat's status ignored: /usr/bin holds links that lead
// nowhere on the test image). Each reading is a line "R <compressor>
// <what> <real> <sys>".
func pageInScript(comps []squashfs.Compression, rounds int) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, c := range comps {
		fmt.Fprintf(&b, "mkdir -p /run/pagein/%[1]s; mount -o ro -t squashfs /dev/disk/by-id/virtio-pagein-%[1]s /run/pagein/%[1]s\n", c)
	}
	b.WriteString("cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }\n")
	fmt.Fprintf(&b, "for r in $(seq %d); do\n", rounds)
	b.WriteString("  order=\"" + joinComps(comps) + "\"; [ $((r % 2)) -eq 0 ] && order=\"" + joinComps(reversed(comps)) + "\"\n")
	b.WriteString("  for c in $order; do\n")
	b.WriteString("    cold; TIMEFORMAT=\"R $c all %R %S\"; { time cat /run/pagein/$c/* > /dev/null 2>&1 || true; } 2>&1\n")
	b.WriteString("    cold; TIMEFORMAT=\"R $c kubelet %R %S\"; { time /run/pagein/$c/kubelet --version > /dev/null; } 2>&1\n")
	b.WriteString("  done\ndone\n")
	b.WriteString("umount /run/pagein/*\n")
	return "bash -c '" + strings.ReplaceAll(b.String(), "'", `'\''`) + "'"
}

func joinComps(cs []squashfs.Compression) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, " ")
}

func reversed(cs []squashfs.Compression) []squashfs.Compression {
	r := slices.Clone(cs)
	slices.Reverse(r)
	return r
}

// parsePageIn collects the readings, keyed by key3, in order.
func parsePageIn(out string) map[string][]float64 {
	got := map[string][]float64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.TrimSpace(line))
		if len(f) != 5 || f[0] != "R" {
			continue
		}
		secs, err1 := strconv.ParseFloat(f[3], 64)
		sys, err2 := strconv.ParseFloat(f[4], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		c := squashfs.Compression(f[1])
		got[key3(c, f[2], "real")] = append(got[key3(c, f[2], "real")], secs)
		got[key3(c, f[2], "sys")] = append(got[key3(c, f[2], "sys")], sys)
	}
	return got
}

// slotDir extracts dir of the image's slot A (through m's disk, before it
// boots) into a temporary directory and returns its path.
func slotDir(t *testing.T, m *machine, dir string) string {
	t.Helper()
	raw, p := m.flatten("slot.raw", layout.LabelSlotA)
	defer removeScratch(t, raw) // now: flatten's cleanup comes late
	dest := filepath.Join(t.TempDir(), "tree")
	offset := strconv.FormatInt(int64(p.Start)*layout.SectorSize, 10)
	out, err := exec.Command("unsquashfs", "-no-progress", "-o", offset, "-d", dest, raw, dir).CombinedOutput()
	require.NoError(t, err, "unsquashfs %s of the slot:\n%s", dir, out)
	return filepath.Join(dest, dir)
}

// median of xs (the lower of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
