package clusterconfig

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
