//go:build e2e

package qemutests

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"
)

// TestFlatBatteryInitNode: the first control plane of a new cluster
// powered on with its RTC at the epoch (-rtc base=1970-01-01, a flat CMOS
// battery). The CMOS keeps a two-digit year, and OVMF, whose valid years
// are 1998 to 2097, reads 70 as 2070, as does the guest kernel after it;
// systemd sets a clock that far ahead back to its own build time. Either
// way the node's clock is wrong by months at least: it must say what its
// hardware clock read and step to the cluster CA's issue time before
// kubeadm makes or checks a certificate, then form its one-node cluster,
// which the operator's kubeconfig reaches although the node's clock is now
// behind the operator's.
func TestFlatBatteryInitNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	config, configs := soloInitConfig(ctx, t, "e2e-1970")
	caIssued := clusterCAIssued(t, config)

	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	m.asSoloInit()
	m.rtcBase = "1970-01-01T00:00:00"
	apiPort := m.forwardAPI()
	start := time.Now()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", config)))

	// The first step says what the hardware clock read. It may be to the
	// image's build time (firstboot's first act, before it reads its
	// config), then a second one to the cluster CA's issue time.
	first := expect(ctx, t, vm, `time: stepped: the clock read (\S+) \(the hardware clock read (\S+)\), before ([^;]+); stepped forward to (\S+),`)
	t.Logf("clock read %s, hardware clock %s; before %s: stepped to %s", first[1], first[2], first[3], first[4])
	rtc, err := time.Parse(time.RFC3339, first[2])
	require.NoError(t, err)
	assert.True(t, rtc.Year() == 1970 || rtc.Year() == 2070, "the hardware clock read %s: 1970, or 2070 through the firmware", rtc)
	caStep := first[0]
	to := first[4]
	if first[3] != "the cluster CA's issue time" {
		second := expect(ctx, t, vm, `time: stepped: the clock read (\S+)(?: \(the hardware clock read \S+\))?, before the cluster CA's issue time; stepped forward to (\S+),`)
		t.Logf("clock read %s; stepped to %s, the cluster CA's issue time", second[1], second[2])
		caStep, to = second[0], second[2]
	}
	stepped, err := time.Parse(time.RFC3339, to)
	require.NoError(t, err)
	assert.WithinDuration(t, caIssued, stepped, time.Second, "stepped to the cluster CA's issue time")

	_, err = vm.Expect(ctx, healthyRE)
	require.NoError(t, err, "the node did not form its cluster")
	t.Logf("healthy %s after power-on", time.Since(start).Round(time.Second))

	// The step came before the first step that runs kubeadm or checks for
	// it (the node's own preflight).
	console := vm.Console()
	stepAt := strings.Index(console, caStep)
	kubeadm := regexp.MustCompile(`(?m)^terrarium: (?:node preflight|init phase \S+)[^\n]*: started`).FindStringIndex(console)
	require.NotNil(t, kubeadm, "no kubeadm step on the console")
	require.GreaterOrEqual(t, stepAt, 0, "the step line is not on the console")
	assert.Less(t, stepAt, kubeadm[0], "the clock was stepped after a kubeadm step began")

	// The operator's kubeconfig, minted by `imagebuild config cluster` an
	// hour and more after the time this node now runs at, works from the
	// host at once.
	checkOperatorKubeconfig(ctx, t, filepath.Join(configs, "admin.kubeconfig"), apiPort, soloIP, "cp-1")
	require.NoError(t, vm.Quit(ctx))
}

// clusterCAIssued is the NotBefore of the cluster CA in a machine config.
func clusterCAIssued(t *testing.T, config string) time.Time {
	t.Helper()
	c, err := machineconfig.Parse("cp-1.yaml", []byte(config))
	require.NoError(t, err)
	at, ok := timesync.CAIssued(c)
	require.True(t, ok, "the machine config carries no cluster CA that parses")
	return at
}
