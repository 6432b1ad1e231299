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
