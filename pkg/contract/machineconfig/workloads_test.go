package machineconfig_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

func TestLocalStorage(t *testing.T) {
	cfgs := clusterConfigs(t)
	for _, tt := range []struct {
		name, storage string
		enabled       bool
		size          int64
		problem       string
	}{
		{name: "absent", enabled: true},
		{name: "sized", storage: "  localStorage:\n    size: 20GiB\n", enabled: true, size: 20 << 30},
		{name: "disabled", storage: "  localStorage:\n    disabled: true\n"},
		{name: "not a size", storage: "  localStorage:\n    size: lots\n", problem: `$.cluster.localStorage.size: "lots" is not a size`},
		{name: "too small", storage: "  localStorage:\n    size: 1MiB\n", problem: "$.cluster.localStorage.size: \"1MiB\" is below the smallest volume area"},
		{name: "sized but disabled", storage: "  localStorage:\n    disabled: true\n    size: 1GiB\n", problem: "$.cluster.localStorage.size: the cluster's local storage is disabled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n"+tt.storage, 1)))
			if tt.problem != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.problem)
				assert.Contains(t, err.Error(), "cp-1.yaml", "the message names the file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, c.Cluster.LocalStorageEnabled(), "local storage on")
			assert.Equal(t, tt.size, c.Cluster.LocalVolumesSize(), "volume area size")
		})
	}
}

func TestMetrics(t *testing.T) {
	cfgs := clusterConfigs(t)
	for _, tt := range []struct {
		name, metrics string
		enabled       bool
	}{
		{name: "absent", enabled: true},
		{name: "disabled", metrics: "  metrics:\n    disabled: true\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := machineconfig.Parse("cp-1.yaml", []byte(strings.Replace(cfgs["cp-1"], "  role: init\n", "  role: init\n"+tt.metrics, 1)))
			require.NoError(t, err)
			assert.Equal(t, tt.enabled, c.Cluster.MetricsEnabled())
		})
	}
}
