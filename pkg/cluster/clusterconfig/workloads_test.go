package clusterconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// By default every node's config leaves the cluster its local-path
// StorageClass and metrics-server; --no-local-storage and --no-metrics
// switch them off on every node alike.
func TestNoLocalStorageNoMetrics(t *testing.T) {
	for _, off := range []bool{false, true} {
		dir := t.TempDir()
		topo := topology()
		topo.NoLocalStorage, topo.NoMetrics = off, off
		_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
		require.NoError(t, err)
		for _, n := range []string{"cp-1", "cp-2", "w-1"} {
			cl := parsed(t, dir, n).Cluster
			assert.Equal(t, !off, cl.LocalStorageEnabled(), n)
			assert.Equal(t, !off, cl.MetricsEnabled(), n)
			if !off {
				assert.Nil(t, cl.LocalStorage, "%s: the default is left out of the config", n)
				assert.Nil(t, cl.Metrics, "%s: the default is left out of the config", n)
			}
		}
	}
}

// --backup-volumes gives every node its own volume backup passphrase, the
// one the cluster CA's key derives for its name; a control plane's config
// with another node's passphrase is refused.
func TestBackupVolumes(t *testing.T) {
	dir := t.TempDir()
	topo := topology()
	topo.BackupVolumes = true
	_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
	require.NoError(t, err)
	s, err := clustersecrets.Load(filepath.Join(dir, "secrets.yaml"))
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, n := range []string{"cp-1", "cp-2", "w-1"} {
		cl := parsed(t, dir, n).Cluster
		want, err := backup.VolumesPassphrase([]byte(s.CA.Key), "lab", n)
		require.NoError(t, err)
		assert.Equal(t, want, cl.VolumesBackupPassphrase(), n)
		assert.False(t, seen[want], "%s: each node has its own passphrase", n)
		seen[want] = true
		interval, keep := cl.BackupSchedule()
		assert.Equal(t, machineconfig.DefaultBackupInterval, interval, "%s: the schedule stays the default", n)
		assert.Equal(t, machineconfig.DefaultBackupKeep, keep, n)
	}

	cp1, err := os.ReadFile(filepath.Join(dir, "cp-1.yaml"))
	require.NoError(t, err)
	w1, err := backup.VolumesPassphrase([]byte(s.CA.Key), "lab", "w-1")
	require.NoError(t, err)
	cp1Pass := parsed(t, dir, "cp-1").Cluster.VolumesBackupPassphrase()
	_, err = machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(string(cp1), cp1Pass, w1, 1)))
	assert.ErrorContains(t, err, `$.cluster.backup.volumesPassphrase: is not the passphrase the cluster's CA key gives node "cp-1"`)

	// Without the flag no node's backups carry volumes.
	dir = t.TempDir()
	_, err = Write(WriteOptions{Topology: topology(), ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
	require.NoError(t, err)
	assert.Empty(t, parsed(t, dir, "w-1").Cluster.VolumesBackupPassphrase())
}

// --load-balancer puts the same pool into every node's config; a range
// that holds a node's address, a worker's included (which a node's own
// config does not list), is refused before anything is written.
func TestLoadBalancerPool(t *testing.T) {
	dir := t.TempDir()
	topo := topology()
	topo.LoadBalancer = []string{"10.77.0.100-10.77.0.120", "10.77.0.128/28"}
	_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
	require.NoError(t, err)
	for _, n := range []string{"cp-1", "cp-2", "w-1"} {
		cl := parsed(t, dir, n).Cluster
		require.True(t, cl.LoadBalancerEnabled(), n)
		assert.Equal(t, topo.LoadBalancer, cl.LoadBalancer.Addresses, n)
	}

	for _, tc := range []struct{ pool, want string }{
		{"10.77.0.15-10.77.0.25", "--load-balancer 10.77.0.15-10.77.0.25 holds w-1's address 10.77.0.20"},
		{"10.77.0.100+20", `--load-balancer "10.77.0.100+20" is neither a range`},
	} {
		dir := t.TempDir()
		topo := topology()
		topo.LoadBalancer = []string{tc.pool}
		_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
		require.Error(t, err, tc.pool)
		assert.Contains(t, err.Error(), tc.want)
		entries, _ := filepath.Glob(filepath.Join(dir, "*"))
		assert.Empty(t, entries, "a refused topology writes nothing")
	}
}

// --state-encryption tpm makes every node require an encrypted
// TERRA-STATE; by default no node's config says, and each machine does
// what it can; a value the machine config does not know is refused.
func TestStateEncryption(t *testing.T) {
	for _, want := range []string{"", "tpm", "none"} {
		dir := t.TempDir()
		topo := topology()
		topo.StateEncryption = want
		_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
		require.NoError(t, err)
		for _, n := range []string{"cp-1", "cp-2", "w-1"} {
			assert.Equal(t, want, parsed(t, dir, n).StateEncryption(), n)
		}
	}
	dir := t.TempDir()
	topo := topology()
	topo.StateEncryption = "luks"
	_, err := Write(WriteOptions{Topology: topo, ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir, TokenTTL: time.Hour, Now: now})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `state.encryption: "luks" is not an encryption`)
}
