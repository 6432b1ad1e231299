package clusterconfig

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// config cluster writes the operator's kubeconfig beside the node
// configs: owner-only, for the first control plane, with the lifetime
// asked for.
func TestWriteAdminKubeconfig(t *testing.T) {
	dir := t.TempDir()
	w, err := Write(WriteOptions{Topology: topology(), ClusterName: "lab", SecretsPath: filepath.Join(dir, "secrets.yaml"), OutDir: dir,
		TokenTTL: time.Hour, Now: now, AdminTTL: 2 * time.Hour})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, AdminKubeconfig), w.Kubeconfig)
	assert.Equal(t, now.Add(2*time.Hour), w.AdminExpires)

	fi, err := os.Stat(w.Kubeconfig)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	data, err := os.ReadFile(w.Kubeconfig)
	require.NoError(t, err)
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `yaml:"server"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
	}
	require.NoError(t, yaml.Unmarshal(data, &kc))
	require.Len(t, kc.Clusters, 1)
	assert.Equal(t, "https://10.77.0.10:6443", kc.Clusters[0].Cluster.Server, "the first control plane")
}
