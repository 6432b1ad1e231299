//go:build e2e

package qemutests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// healthyRE is a formed node's status line.
var healthyRE = regexp.MustCompile(`terrarium-status: \{[^\n]*"state":"(?:provisioned|verified)"[^\n]*"healthy":true`)

// stepRE is a step line of the console: what the node was doing.
var stepRE = regexp.MustCompile(`(?m)^terrarium: ([^\n]*?): (?:started|retry|waiting)\b`)

// The one control plane of a one-node cluster: its cluster address and
// link MAC, and the MAC of its management NIC (SSH and the API from the
// host).
const soloIP, soloLinkMAC, soloMgmtMAC = "10.77.0.10", "52:54:00:77:00:10", "52:54:00:00:00:10"

// soloInitConfig writes a one-node cluster's configs with `imagebuild
// config cluster` and returns its control plane's machine config, with
// the management NIC, and the directory of the configs.
func soloInitConfig(ctx context.Context, t *testing.T, name string) (config, configs string) {
	t.Helper()
	_, configs = clusterConfigs(ctx, t, name, "--control-plane", "cp-1="+soloIP+"@"+soloLinkMAC)
	return withManagementNIC(t, filepath.Join(configs, "cp-1.yaml"), soloMgmtMAC), configs
}

// asSoloInit makes m the control plane of soloInitConfig: its NICs and
// 3 GiB, its cluster link with nobody on the other end.
func (m *machine) asSoloInit() {
	m.mac, m.memMiB = soloMgmtMAC, 3072
	m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", freePort(m.t)), MAC: soloLinkMAC}
}

// TestPowerCuts cuts the power of an init node at random moments of its
// formation (QMP quit, no flush: what a pulled plug does), powers it on
// again, and requires the cluster to form every time. Each trial is a new
// machine (a fresh disk from the image) with the same config disk. The
// first trial is uncut and measures the formation; each cut falls
// uniformly between 5 s after power-on and 90 % of that time, and a
// moment that falls after the node was already healthy cuts nothing and
// is drawn again. TERRARIUM_POWERCUT_SEED fixes the moments (default: the
// time), TERRARIUM_POWERCUT_CUTS their number (default 20); both are
// printed, with a table of every cut.
func TestPowerCuts(t *testing.T) {
	cuts := 20
	if v := os.Getenv("TERRARIUM_POWERCUT_CUTS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "TERRARIUM_POWERCUT_CUTS")
		cuts = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TERRARIUM_POWERCUT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "TERRARIUM_POWERCUT_SEED")
		seed = n
	}
	t.Logf("power cuts: %d, seed %d (TERRARIUM_POWERCUT_SEED=%d reproduces the moments)", cuts, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))

	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cuts+1)*15*time.Minute)
	defer cancel()
	image := fixture(t, "TERRARIUM_IMAGE")
	config, _ := soloInitConfig(ctx, t, "e2e-cut")

	// trial boots a fresh machine; with cutAt > 0 it cuts the power that
	// long after power-on, unless the node is healthy first, and powers
	// it on again. It returns what the node was doing at the cut and the
	// time from the second power-on to healthy.
	type result struct {
		cutAt, recovered time.Duration
		doing            string
		cut              bool
	}
	trial := func(cutAt time.Duration) result {
		m := newMachine(t, image)
		// A trial's disk (~1 GB once formed) goes when the trial ends:
		// twenty of them would fill a small disk.
		defer removeScratch(t, m.disk)
		m.asSoloInit()
		disk := configAttached(m.configDisk("config.img", config))
		start := time.Now()
		vm := m.boot(ctx, disk)
		var r result
		if cutAt > 0 {
			cctx, ccancel := context.WithTimeout(ctx, cutAt)
			_, err := vm.Expect(cctx, healthyRE)
			ccancel()
			if err == nil {
				t.Logf("healthy %s after power-on, before its cut at %s", time.Since(start).Round(time.Second), cutAt)
				r.recovered = time.Since(start)
				require.NoError(t, vm.Quit(ctx))
				return r
			}
			require.NoError(t, ctx.Err())
			if steps := stepRE.FindAllStringSubmatch(vm.Console(), -1); len(steps) > 0 {
				r.doing = steps[len(steps)-1][1]
			} else {
				r.doing = "booting (no step yet)"
			}
			require.NoError(t, vm.Quit(ctx), "power cut") // Quit waits for QEMU to exit
			r.cut, r.cutAt = true, cutAt
			start = time.Now()
			vm = m.boot(ctx, disk)
		}
		_, err := vm.Expect(ctx, healthyRE)
		require.NoError(t, err, "the node did not form its cluster after a power cut at %s during %q (seed %d)", cutAt, r.doing, seed)
		r.recovered = time.Since(start)
		require.NoError(t, vm.Quit(ctx))
		return r
	}

	base := trial(0)
	t.Logf("uncut formation: healthy %s after power-on", base.recovered.Round(time.Second))
	var table strings.Builder
	fmt.Fprintf(&table, "%-4s %-8s %-10s %s\n", "cut", "at", "recovered", "during")
	formed, early := 0, 0
	// A moment after which the node was already healthy cuts nothing: it
	// is logged and another moment drawn, until cuts cuts were made.
	for formed < cuts {
		at := 5*time.Second + time.Duration(rng.Int64N(int64(base.recovered*9/10-5*time.Second)))
		r := trial(at)
		if !r.cut {
			early++
			t.Logf("     %-8s healthy after %s, before the cut: not counted", at.Round(time.Second), r.recovered.Round(time.Second))
			continue
		}
		formed++
		row := fmt.Sprintf("%-4d %-8s %-10s %s", formed, at.Round(time.Second), r.recovered.Round(time.Second), r.doing)
		t.Log(row)
		table.WriteString(row + "\n")
	}
	if early > 0 {
		fmt.Fprintf(&table, "(%d more moments fell after the node was healthy and cut nothing)\n", early)
	}
	t.Logf("power cuts: %d/%d formed (seed %d)\n%s", formed, cuts, seed, table.String())
}
