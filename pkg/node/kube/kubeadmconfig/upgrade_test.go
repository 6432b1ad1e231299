package kubeadmconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestRenderUpgrade(t *testing.T) {
	type doc struct {
		Kind  string `yaml:"kind"`
		Apply struct {
			KubernetesVersion string   `yaml:"kubernetesVersion"`
			AllowRCUpgrades   bool     `yaml:"allowRCUpgrades"`
			AllowExperimental bool     `yaml:"allowExperimentalUpgrades"`
			Ignore            []string `yaml:"ignorePreflightErrors"`
			SkipPhases        []string `yaml:"skipPhases"`
			Patches           *struct {
				Directory string `yaml:"directory"`
			} `yaml:"patches"`
		} `yaml:"apply"`
		Node struct {
			Patches *struct {
				Directory string `yaml:"directory"`
			} `yaml:"patches"`
		} `yaml:"node"`
		Timeouts map[string]string `yaml:"timeouts"`
	}
	for _, tc := range []struct {
		name        string
		in          UpgradeInput
		rc, exp, cp bool
	}{
		{"control plane", UpgradeInput{KubernetesVersion: "v1.36.4", ControlPlane: true, IgnorePreflightErrors: []string{"SystemVerification", "CRI"}}, false, false, true},
		{"worker", UpgradeInput{KubernetesVersion: "v1.37.0", IgnorePreflightErrors: []string{"SystemVerification"}}, false, false, false},
		{"release candidate", UpgradeInput{KubernetesVersion: "v1.37.0-rc.1", ControlPlane: true}, true, false, true},
		{"beta", UpgradeInput{KubernetesVersion: "v1.38.0-beta.0"}, false, true, false},
		{"patch", UpgradeInput{KubernetesVersion: "v1.36.4", ControlPlane: true, SkipApplyPreflight: true}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := RenderUpgrade(tc.in)
			require.NoError(t, err)
			var d doc
			require.NoError(t, yaml.Unmarshal(b, &d), "%s", b)
			assert.Equal(t, "UpgradeConfiguration", d.Kind)
			assert.Equal(t, tc.in.KubernetesVersion, d.Apply.KubernetesVersion)
			assert.Equal(t, tc.rc, d.Apply.AllowRCUpgrades)
			assert.Equal(t, tc.exp, d.Apply.AllowExperimental)
			assert.Equal(t, len(tc.in.IgnorePreflightErrors), len(d.Apply.Ignore))
			if tc.in.SkipApplyPreflight {
				assert.Equal(t, []string{"preflight"}, d.Apply.SkipPhases)
			} else {
				assert.Empty(t, d.Apply.SkipPhases, "kubeadm's preflight runs")
			}
			if tc.cp {
				require.NotNil(t, d.Apply.Patches, "the control plane's patches survive the upgrade")
				assert.Equal(t, PatchesDir, d.Apply.Patches.Directory)
				require.NotNil(t, d.Node.Patches)
			} else {
				assert.Nil(t, d.Apply.Patches)
			}
			assert.Equal(t, "20m0s", d.Timeouts["upgradeManifests"], "formation's patience, not kubeadm's 5 minutes")
		})
	}
	_, err := RenderUpgrade(UpgradeInput{})
	assert.Error(t, err)
}
