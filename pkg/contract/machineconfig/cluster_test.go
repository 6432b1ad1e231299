package machineconfig_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clusterconfig"
	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// clusterConfigs makes a real cluster's configs (init, controlplane, worker).
func clusterConfigs(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	_, err := clusterconfig.Write(clusterconfig.WriteOptions{
		Topology: clusterconfig.Topology{
			ControlPlanes: []clusterconfig.Node{{Hostname: "cp-1", IP: netip.MustParseAddr("10.77.0.10")}, {Hostname: "cp-2", IP: netip.MustParseAddr("10.77.0.11")}},
			Workers:       []clusterconfig.Node{{Hostname: "w-1", IP: netip.MustParseAddr("10.77.0.20")}},
			PrefixLength:  24, Interface: "en*",
		},
		ClusterName: "lab", SecretsPath: filepath.Join(dir, "s.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now,
	})
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range []string{"cp-1", "cp-2", "w-1"} {
		b, err := os.ReadFile(filepath.Join(dir, n+".yaml"))
		require.NoError(t, err)
		out[n] = string(b)
	}
	return out
}

// The bad config disks of the e2e issue, each with the message a person
// at the console gets.
func TestBadClusterConfigs(t *testing.T) {
	cfgs := clusterConfigs(t)
	other, err := clustersecrets.Generate("other", now, time.Hour, nil)
	require.NoError(t, err)
	otherHash, _ := other.CACertHash()
	tests := []struct {
		name, node string
		edit       func(string) string
		want       []string
	}{
		{"wrong CA hash", "w-1", func(s string) string {
			return replaceLine(s, "caCertHash:", "  caCertHash: "+otherHash)
		}, []string{"$.cluster.caCertHash: " + otherHash + " does not match caCert", "regenerate it with imagebuild config cluster"}},
		{"worker listed as control plane", "w-1", func(s string) string {
			return strings.Replace(s, "    - 10.77.0.11\n", "    - 10.77.0.11\n    - 10.77.0.20\n", 1)
		}, []string{"$.cluster.role: worker, but nodeIP 10.77.0.20 is listed as a control plane"}},
		{"controlplane that is not one", "cp-2", func(s string) string {
			return strings.Replace(s, "    - 10.77.0.11\n", "", 1)
		}, []string{"$.cluster.role: controlplane, but nodeIP 10.77.0.11 is not among controlPlanes"}},
		{"control plane outside the subnet", "w-1", func(s string) string {
			return strings.Replace(s, "    - 10.77.0.11\n", "    - 10.78.0.11\n", 1)
		}, []string{"$.cluster.controlPlanes[1]: 10.78.0.11 is outside this node's subnets (10.77.0.20/24) and no gateway is set"}},
		{"node IP not the node's", "w-1", func(s string) string {
			return replaceLine(s, "nodeIP:", "  nodeIP: 10.77.0.99")
		}, []string{"$.cluster.nodeIP: 10.77.0.99 is not one of this node's static addresses (10.77.0.20/24)"}},
		{"control plane without CA keys", "cp-2", func(s string) string {
			return s[:strings.Index(s, "  pki:\n")]
		}, []string{"$.cluster.pki: a controlplane node needs the cluster's CA keys"}},
		{"ignore every preflight check", "w-1", func(s string) string {
			return strings.Replace(s, "  role: worker\n", "  role: worker\n  ignorePreflightErrors:\n    - NumCPU\n    - all\n", 1)
		}, []string{"$.cluster.ignorePreflightErrors[1]: all would hide every kubeadm preflight failure"}},
		{"preflight check name with a space", "cp-2", func(s string) string {
			return strings.Replace(s, "  role: controlplane\n", "  role: controlplane\n  ignorePreflightErrors:\n    - Num CPU\n", 1)
		}, []string{`$.cluster.ignorePreflightErrors[0]: "Num CPU" is not a kubeadm preflight check name`}},
		{"backup interval that is no duration", "cp-2", func(s string) string {
			return strings.Replace(s, "  role: controlplane\n", "  role: controlplane\n  backup:\n    interval: hourly\n", 1)
		}, []string{`$.cluster.backup.interval: "hourly" is not a duration; write it like 30m or 6h`}},
		{"backup interval too short", "cp-1", func(s string) string {
			return strings.Replace(s, "  role: init\n", "  role: init\n  backup:\n    interval: 30s\n    keep: 5000\n", 1)
		}, []string{"$.cluster.backup.interval: 30s is outside 5m0s to 168h", "$.cluster.backup.keep: 5000 is outside 1 to 1000"}},
		{"backup on a worker", "w-1", func(s string) string {
			return strings.Replace(s, "  role: worker\n", "  role: worker\n  backup:\n    keep: 3\n", 1)
		}, []string{"$.cluster.backup: workers hold no etcd to back up"}},
		{"volume backup passphrase of another form", "w-1", func(s string) string {
			return strings.Replace(s, "  role: worker\n", "  role: worker\n  backup:\n    volumesPassphrase: terrarium-backup-v1:"+strings.Repeat("A", 43)+"\n", 1)
		}, []string{"$.cluster.backup.volumesPassphrase: is not terrarium-volumes-v1:<32 bytes in base64url>", "--backup-volumes"}},
		{"volume backup passphrase not the CA's for this node", "cp-1", func(s string) string {
			return strings.Replace(s, "  role: init\n", "  role: init\n  backup:\n    volumesPassphrase: terrarium-volumes-v1:"+strings.Repeat("A", 43)+"\n", 1)
		}, []string{`$.cluster.backup.volumesPassphrase: is not the passphrase the cluster's CA key gives node "cp-1"`}},
		{"unknown role", "w-1", func(s string) string {
			return replaceLine(s, "role:", "  role: master")
		}, []string{`$.cluster.role: "master" is not a role`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := machineconfig.Parse("machine.yaml", []byte(tt.edit(cfgs[tt.node])))
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
	for n, c := range cfgs {
		_, err := machineconfig.Parse(n, []byte(c))
		assert.NoError(t, err, "the generated config of %s is invalid", n)
	}
}

func TestExpiredToken(t *testing.T) {
	c, err := machineconfig.Parse("w-1", []byte(clusterConfigs(t)["w-1"]))
	require.NoError(t, err)
	require.NoError(t, c.Cluster.CheckToken(now), "fresh token")
	err = c.Cluster.CheckToken(now.Add(2 * time.Hour))
	assert.ErrorContains(t, err, "the bootstrap token expired at 2026-11-21T13:00:00Z")
	assert.ErrorContains(t, err, "--rotate-token")
}

func TestBackupSchedule(t *testing.T) {
	cfgs := clusterConfigs(t)
	for _, tt := range []struct {
		name, backup string
		interval     time.Duration
		keep         int
	}{
		{"defaults", "", machineconfig.DefaultBackupInterval, machineconfig.DefaultBackupKeep},
		{"both", "  backup:\n    interval: 6h\n    keep: 8\n", 6 * time.Hour, 8},
		{"keep only", "  backup:\n    keep: 3\n", machineconfig.DefaultBackupInterval, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n"+tt.backup, 1)))
			require.NoError(t, err)
			interval, keep := c.Cluster.BackupSchedule()
			assert.Equal(t, tt.interval, interval, "backup interval")
			assert.Equal(t, tt.keep, keep, "backups kept")
		})
	}
}

func replaceLine(s, prefix, line string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			lines[i] = line
			break
		}
	}
	return strings.Join(lines, "\n")
}
