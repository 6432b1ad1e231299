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

	"github.com/terrarium-os/terrarium/pkg/qemu"
)

// idleWindow is one measurement of an idle control plane.
const idleWindow = 120 * time.Second

// TestControlPlaneIdleCPU forms a one-node cluster (an init node, nothing
// else) and measures what its control plane costs the host once formed and
// idle: the QEMU process's CPU time over a window, and inside the guest,
// which processes took it (top over the same window). Under TCG every
// guest cycle is a host cycle many times over, so this is the figure that
// decides how many control planes a host's cores can carry.
func TestControlPlaneIdleCPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cp := &clusterNode{name: "cp-1", ip: "10.77.0.10", linkMAC: "52:54:00:77:00:10", mgmtMAC: "52:54:00:00:00:10"}
	key, dir := clusterConfigs(ctx, t, "idle", "--control-plane", cp.name+"="+cp.ip+"@"+cp.linkMAC)
	cp.m = newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	cp.m.mac, cp.m.memMiB = cp.mgmtMAC, 3072
	cp.sshPort = cp.m.forwardSSH()
	cp.m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", freePort(t)), MAC: cp.linkMAC}
	cp.disk = cp.m.configDisk("config.img", withManagementNIC(t, filepath.Join(dir, cp.name+".yaml"), cp.mgmtMAC))
	start := time.Now()
	cp.vm = cp.m.boot(ctx, configAttached(cp.disk))
	if _, err := cp.vm.Expect(ctx, regexp.MustCompile(`terrarium-status: \{[^\n]*"state":"provisioned"[^\n]*"healthy":true`)); err != nil {
		t.Fatalf("cp-1: %v", err)
	}
	t.Logf("cp-1 healthy %s after power-on", time.Since(start).Round(time.Second))
	ssh := dialSSH(ctx, t, cp.sshPort, key)
	ssh.run("kubectl wait --for=condition=Available --timeout=10m -n kube-system deployment/coredns")
	// Let the controllers' first resyncs and the add-ons' start settle.
	time.Sleep(60 * time.Second)

	for i := 1; i <= 2; i++ {
		before, err := hostCPU(cp.vm.Pid())
		if err != nil {
			t.Fatal(err)
		}
		from := time.Now()
		// top's second frame covers the window: per-process %CPU of one
		// guest CPU, and the guest's idle share. Its output is only shown
		// (the pty may lose it); the figure is the host's.
		top := ssh.run(fmt.Sprintf("top -b -w 200 -d %d -n 2 -o %%CPU | awk '/^top -/{n++} n==2' | head -25", int(idleWindow.Seconds())))
		after, err := hostCPU(cp.vm.Pid())
		if err != nil {
			t.Fatal(err)
		}
		// The window's real length: sudo's pty can lose top's output and
		// ssh adds its own seconds.
		elapsed := time.Since(from)
		share := (after - before).Seconds() / elapsed.Seconds() * 100
		if share <= 0 {
			t.Fatalf("window %d: QEMU took %v of CPU: the measurement is broken", i, after-before)
		}
		t.Logf("window %d: idle control plane (2 vCPUs): QEMU took %.0f %% of a host core over %s\n%s", i, share, elapsed.Round(time.Second), top)
	}
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
