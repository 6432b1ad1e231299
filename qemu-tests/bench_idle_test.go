//go:build e2e

package qemutests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// idleWindow is one measurement of an idle control plane; idleWindows of
// them are taken per image.
const (
	idleWindow  = 60 * time.Second
	idleWindows = 3
)

// coarseTimers is the kernel argument the default image carries and the
// baseline image drops (see os/terrarium.yaml).
const coarseTimers = "highres=off"

// idleFigures is what one image's idle control plane cost.
type idleFigures struct {
	healthy time.Duration // power-on to a healthy node
	host    float64       // QEMU's share of a host core, mean over the windows
	guest   guestCPU      // the guest over all windows
	// audit is what the API server's audit log grew by over the
	// windows, in span.
	audit int64
	span  time.Duration
}

// auditMBPerHour is the idle audit log's growth in MB an hour.
func (f idleFigures) auditMBPerHour() float64 { return float64(f.audit) / 1e6 / f.span.Hours() }

// auditIdleWindows: the idle audit log is measured over this many
// windows, ten minutes: the controllers' lease renewals and resyncs come
// every few seconds to a few minutes.
const auditIdleWindows = 10

// TestControlPlaneIdleAudit forms a one-node cluster from the default
// image and measures how fast its audit log grows once the cluster is
// formed and idle: nobody calls the API but the cluster's own
// components. The log keeps 10 files of 100 MB for 30 days at most
// (docs/security.md); the figure says how long that is.
func TestControlPlaneIdleAudit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	fig := measureIdle(ctx, t, "default", fixture(t, "TERRARIUM_IMAGE"), auditIdleWindows)
	rate := fig.auditMBPerHour()
	t.Logf("idle one-node control plane: audit log %d bytes in %s, %.2f MB an hour, %.0f MB a day; its 10 files of 100 MB hold %.0f days of it",
		fig.audit, fig.span.Round(time.Second), rate, rate*24, 1000/(rate*24))
	assert.Positive(t, fig.audit, "an idle cluster's own components are audited too: the log did not grow")
	// What formation and e2e's calls write is about 15 MB an hour: an
	// idle cluster writes less.
	assert.Less(t, rate, 15.0, "the idle audit log grew %.2f MB an hour", rate)
}

// TestControlPlaneIdleCPU forms a one-node cluster (an init node, nothing
// else) and measures what its control plane costs once formed and idle:
// the QEMU process's CPU time over each window, and inside the guest its
// idle share, context switches and local timer interrupts per second
// (/proc/stat, /proc/interrupts). Under TCG every guest cycle is a host
// cycle many times over, so this is the figure that decides how many
// control planes a host's cores can carry.
//
// It does so twice, one after the other: with the default image, and with
// a baseline built from the same spec without coarseTimers (the kernel's
// one-shot high-resolution timers). The default image must cost the host
// less: that is what the spec claims for the argument.
func TestControlPlaneIdleCPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	baseline := buildWithoutKernelArg(ctx, t, coarseTimers)
	def := measureIdle(ctx, t, "default ("+coarseTimers+")", fixture(t, "TERRARIUM_IMAGE"), idleWindows)
	base := measureIdle(ctx, t, "baseline (high-resolution timers)", baseline, idleWindows)
	t.Logf("idle one-node control plane, 2 vCPUs, %d windows of %s each:\n"+
		"                         healthy   host CPU  guest idle  ctxt/s  timer irq/s\n"+
		"  default (%s)   %7s   %6.0f %%  %8.0f %%  %6.0f  %11.0f\n"+
		"  baseline (hrtimers)  %7s   %6.0f %%  %8.0f %%  %6.0f  %11.0f\n"+
		"  default / baseline host CPU: %.2f",
		idleWindows, idleWindow, coarseTimers,
		def.healthy.Round(time.Second), def.host, def.guest.idlePct(), def.guest.perSec(def.guest.ctxt), def.guest.perSec(def.guest.timer),
		base.healthy.Round(time.Second), base.host, base.guest.idlePct(), base.guest.perSec(base.guest.ctxt), base.guest.perSec(base.guest.timer),
		def.host/base.host)
	assert.Less(t, def.host, base.host, "the default image's idle control plane took %.0f %% of a host core, the baseline's %.0f %%: %s no longer pays for itself (os/terrarium.yaml)", def.host, base.host, coarseTimers)
}

// buildWithoutKernelArg builds the default spec with arg dropped from its
// kernel command line and returns the qcow2 image. The spec copy sits in
// a scratch tree whose bundles, components, overlay and Debian lock link
// to the repository's, so its relative paths, and the build cache, are
// the same.
func buildWithoutKernelArg(ctx context.Context, t *testing.T, arg string) string {
	t.Helper()
	spec, err := os.ReadFile("../os/terrarium.yaml")
	require.NoError(t, err)
	line := "    - " + arg + "\n"
	require.Contains(t, string(spec), line, "os/terrarium.yaml has no kernel argument %q to drop", arg)
	tree := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(tree, "os"), 0o755))
	for _, link := range []string{"bundles", "components", "os/overlay", "os/terrarium.lock.yaml"} {
		target, err := filepath.Abs(filepath.Join("..", link))
		require.NoError(t, err)
		require.NoError(t, os.Symlink(target, filepath.Join(tree, link)))
	}
	p := filepath.Join(tree, "os", "terrarium.yaml")
	require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(spec), line, "", 1)), 0o644))
	out := filepath.Join(tree, "out")
	return filepath.Join(out, buildSpec(ctx, t, p, out).Outputs["qcow2"].File)
}

// measureIdle forms a one-node cluster from image, lets it settle and
// measures windows windows; the VM is stopped before it returns.
func measureIdle(ctx context.Context, t *testing.T, label, image string, windows int) idleFigures {
	t.Helper()
	cp := &clusterNode{name: "cp-1", ip: "10.77.0.10", linkMAC: "52:54:00:77:00:10", mgmtMAC: "52:54:00:00:00:10"}
	key, dir := clusterConfigs(ctx, t, "idle", "--control-plane", cp.name+"="+cp.ip+"@"+cp.linkMAC)
	cp.m = newMachine(t, image)
	cp.m.mac, cp.m.memMiB = cp.mgmtMAC, 3072
	cp.sshPort = cp.m.forwardSSH()
	cp.m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", freePort(t)), MAC: cp.linkMAC}
	cp.disk = cp.m.configDisk("config.img", withManagementNIC(t, filepath.Join(dir, cp.name+".yaml"), cp.mgmtMAC))
	start := time.Now()
	cp.vm = cp.m.boot(ctx, configAttached(cp.disk))
	defer cp.vm.Close()
	_, err := cp.vm.Expect(ctx, regexp.MustCompile(`terrarium-status: \{[^\n]*"state":"provisioned"[^\n]*"healthy":true`))
	require.NoError(t, err, "%s: cp-1", label)
	fig := idleFigures{healthy: time.Since(start)}
	t.Logf("%s: cp-1 healthy %s after power-on", label, fig.healthy.Round(time.Second))
	ssh := dialSSH(ctx, t, cp.sshPort, key)
	ssh.run("kubectl wait --for=condition=Available --timeout=10m -n kube-system deployment/coredns")
	// Let the controllers' first resyncs and the add-ons' start settle.
	time.Sleep(60 * time.Second)

	audit0, at0 := auditBytes(t, ssh)
	var hostSum float64
	for i := 1; i <= windows; i++ {
		g0 := readGuestCPU(t, ssh)
		h0, err := hostCPU(cp.vm.Pid())
		require.NoError(t, err)
		from := time.Now()
		// top's second frame covers the window: per-process %CPU of one
		// guest CPU. It is only shown (sudo's pty may lose it); the
		// figures come from /proc.
		top := ssh.run(fmt.Sprintf("top -b -w 200 -d %d -n 2 -o %%CPU | awk '/^top -/{n++} n==2' | head -22", int(idleWindow.Seconds())))
		h1, err := hostCPU(cp.vm.Pid())
		require.NoError(t, err)
		// The window's real length: ssh adds its own seconds.
		elapsed := time.Since(from)
		g1 := readGuestCPU(t, ssh)
		share := (h1 - h0).Seconds() / elapsed.Seconds() * 100
		require.Positive(t, share, "%s window %d: QEMU took %v of CPU: the measurement is broken", label, i, h1-h0)
		w := g1.since(g0)
		hostSum += share
		fig.guest = fig.guest.add(w)
		t.Logf("%s window %d (%s): QEMU %.0f %% of a host core; guest %.0f %% idle, %.0f %% system, %.0f context switches/s, %.0f timer interrupts/s\n%s",
			label, i, elapsed.Round(time.Second), share, w.idlePct(), w.systemPct(), w.perSec(w.ctxt), w.perSec(w.timer), top)
	}
	fig.host = hostSum / float64(windows)
	audit1, at1 := auditBytes(t, ssh)
	fig.audit, fig.span = audit1-audit0, at1.Sub(at0)
	t.Logf("%s: audit log %d bytes in %s idle, %.2f MB an hour", label, fig.audit, fig.span.Round(time.Second), fig.auditMBPerHour())
	return fig
}

// auditBytes is the size of the control plane's audit log, its rotated
// files included, and the guest's time then.
func auditBytes(t *testing.T, ssh *sshClient) (int64, time.Time) {
	t.Helper()
	out, err := ssh.sudoTry(auditLogSize + " && date -u +%s")
	require.NoError(t, err, "the audit log's size: %s", out)
	var size, at int64
	_, err = fmt.Sscan(strings.TrimSpace(out), &size, &at)
	require.NoError(t, err, "the audit log's size: %q", out)
	return size, time.Unix(at, 0)
}

// guestCPU is a snapshot (or a difference of two) of the guest's CPU
// counters: /proc/stat's aggregate CPU ticks, its context switches, and
// the local timer interrupts of all CPUs (/proc/interrupts, LOC).
type guestCPU struct {
	ticks       [8]int64 // user nice system idle iowait irq softirq steal
	ctxt, timer int64
	uptime      float64 // seconds
}

var guestCPURE = regexp.MustCompile(`(?s)^cpu .*\nctxt \d+\s*\nLOC: [\d ]+\s*\nuptime [\d.]+`)

func readGuestCPU(t *testing.T, s *sshClient) guestCPU {
	t.Helper()
	// Read without a terminal: through one, reads from a busy guest come
	// back empty now and then.
	out, err := s.read(`grep -E '^(cpu |ctxt )' /proc/stat; awk '$1=="LOC:"{s=0; for(i=2;i<=NF && $i ~ /^[0-9]+$/;i++) s+=$i; print "LOC:", s}' /proc/interrupts; echo "uptime $(cut -d' ' -f1 /proc/uptime)"`)
	require.NoError(t, err, out)
	m := guestCPURE.FindString(out)
	require.NotEmpty(t, m, "guest CPU counters: unexpected output %q", out)
	var g guestCPU
	for _, line := range strings.Split(m, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 9 && f[0] == "cpu":
			for i := range g.ticks {
				g.ticks[i] = atoi(t, f[i+1])
			}
		case len(f) == 2 && f[0] == "ctxt":
			g.ctxt = atoi(t, f[1])
		case len(f) == 2 && f[0] == "LOC:":
			g.timer = atoi(t, f[1])
		case len(f) == 2 && f[0] == "uptime":
			u, err := strconv.ParseFloat(f[1], 64)
			require.NoError(t, err, "guest uptime %q", f[1])
			g.uptime = u
		}
	}
	return g
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "guest counter %q", s)
	return n
}

func (g guestCPU) since(o guestCPU) guestCPU {
	d := guestCPU{ctxt: g.ctxt - o.ctxt, timer: g.timer - o.timer, uptime: g.uptime - o.uptime}
	for i := range d.ticks {
		d.ticks[i] = g.ticks[i] - o.ticks[i]
	}
	return d
}

func (g guestCPU) add(o guestCPU) guestCPU {
	d := guestCPU{ctxt: g.ctxt + o.ctxt, timer: g.timer + o.timer, uptime: g.uptime + o.uptime}
	for i := range d.ticks {
		d.ticks[i] = g.ticks[i] + o.ticks[i]
	}
	return d
}

func (g guestCPU) total() int64 {
	var n int64
	for _, v := range g.ticks {
		n += v
	}
	return max(n, 1)
}

func (g guestCPU) idlePct() float64   { return float64(g.ticks[3]) / float64(g.total()) * 100 }
func (g guestCPU) systemPct() float64 { return float64(g.ticks[2]) / float64(g.total()) * 100 }
func (g guestCPU) perSec(n int64) float64 {
	if g.uptime <= 0 {
		return 0
	}
	return float64(n) / g.uptime
}

// hostCPU returns the user and system CPU time a host process has used.
func hostCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of QEMU (pid %d): %w", pid, err)
	}
	// Fields after "(comm) ": state is the first; utime and stime are the
	// 12th and 13th (proc(5) numbers them 14 and 15).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	// USER_HZ is 100 on every Linux architecture Go runs QEMU on here.
	return time.Duration(ticks) * time.Second / 100, nil
}
