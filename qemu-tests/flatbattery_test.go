//go:build e2e

package qemutests

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// TestFlatBatteryInitNode: the first control plane of a new cluster
// powered on with its RTC at the epoch (a flat CMOS battery reads
// 1970-01-01). systemd advances the clock only to its own build time, so
// the node must say what its hardware clock read and step forward to the
// cluster CA's issue time before kubeadm makes or checks a certificate;
// then it forms its one-node cluster.
func TestFlatBatteryInitNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	image := fixture(t, "TERRARIUM_IMAGE")
	const ip, linkMAC, mgmtMAC = "10.77.0.10", "52:54:00:77:00:10", "52:54:00:00:00:10"
	_, configs := clusterConfigs(ctx, t, "e2e-1970", "--control-plane", "cp-1="+ip+"@"+linkMAC)
	config := withManagementNIC(t, filepath.Join(configs, "cp-1.yaml"), mgmtMAC)
	caIssued := clusterCAIssued(t, config)

	m := newMachine(t, image)
	m.mac, m.memMiB = mgmtMAC, 3072
	// The cluster link, with nobody on the other end.
	m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", freePort(t)), MAC: linkMAC}
	m.rtcBase = "1970-01-01T00:00:00"
	start := time.Now()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", config)))

	stepped := expect(ctx, t, vm, `time: stepped: the clock read (\S+) \(the hardware clock read (\S+)\), before the cluster CA's issue time; stepped forward to (\S+),`)
	t.Logf("clock read %s, hardware clock %s, stepped to %s", stepped[1], stepped[2], stepped[3])
	rtc, err := time.Parse(time.RFC3339, stepped[2])
	require.NoError(t, err)
	assert.Equal(t, 1970, rtc.Year(), "the hardware clock's reading, as the console gives it")
	to, err := time.Parse(time.RFC3339, stepped[3])
	require.NoError(t, err)
	assert.WithinDuration(t, caIssued, to, time.Second, "stepped to the cluster CA's issue time")

	_, err = vm.Expect(ctx, healthyRE)
	require.NoError(t, err, "the node did not form its cluster")
	t.Logf("healthy %s after power-on", time.Since(start).Round(time.Second))

	// The step came before the first step that runs kubeadm or checks for
	// it (the node's own preflight).
	console := vm.Console()
	stepAt := strings.Index(console, stepped[0])
	first := regexp.MustCompile(`(?m)^terrarium: (?:node preflight|init phase \S+)[^\n]*: started`).FindStringIndex(console)
	require.NotNil(t, first, "no kubeadm step on the console")
	assert.Less(t, stepAt, first[0], "the clock was stepped after a kubeadm step began")
	require.NoError(t, vm.Quit(ctx))
}

// clusterCAIssued is the NotBefore of the cluster CA in a machine config.
func clusterCAIssued(t *testing.T, path string) time.Time {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	c, err := machineconfig.Parse(path, data)
	require.NoError(t, err)
	require.NotNil(t, c.Cluster, "%s has no cluster", path)
	b, _ := pem.Decode([]byte(c.Cluster.CACert))
	require.NotNil(t, b, "%s: the cluster's caCert is no PEM", path)
	ca, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return ca.NotBefore
}
