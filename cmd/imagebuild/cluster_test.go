package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// --pod-security sets the levels of the control planes' configs, and a
// level that is none is refused naming the flag.
func TestClusterPodSecurityFlag(t *testing.T) {
	dir := t.TempDir()
	run := func(levels string) error {
		cmd := clusterConfigCmd()
		cmd.SetArgs([]string{"--name", "lab", "--control-plane", "cp-1=10.77.0.10", "--worker", "w-1=10.77.0.20",
			"-o", dir, "--pod-security", levels})
		return cmd.Execute()
	}
	require.NoError(t, run("enforce=restricted,warn=restricted"))
	data, err := os.ReadFile(filepath.Join(dir, "cp-1.yaml"))
	require.NoError(t, err)
	c, err := machineconfig.Parse("cp-1.yaml", data)
	require.NoError(t, err)
	assert.Equal(t, machineconfig.PodSecurity{Enforce: "restricted", Audit: "restricted", Warn: "restricted"}, c.Cluster.PodSecurityLevels())
	assert.NotEmpty(t, c.Cluster.SecretsEncryptionKey)

	err = run("enforce=strict")
	assert.ErrorContains(t, err, `--pod-security: pod security enforce=strict: "strict" is not a Pod Security level`)
}
