package upgrade

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckKubernetes(t *testing.T) {
	worker := func(running string, apis ...string) KubernetesSkew {
		return KubernetesSkew{Running: running, APIServers: apis}
	}
	cp := func(running string, apis ...string) KubernetesSkew {
		return KubernetesSkew{Running: running, ControlPlane: true, APIServers: apis}
	}
	tests := []struct {
		name   string
		skew   KubernetesSkew
		target string
		err    error  // nil: accepted
		says   string // part of the message
	}{
		{"same Kubernetes: the OS alone", worker("v1.36.3", "v1.36.3"), "v1.36.3", nil, ""},
		{"no Kubernetes in the upgrade", worker("v1.36.3"), "", nil, ""},
		{"no Kubernetes on the node", worker(""), "v1.36.3", nil, ""},
		{"a patch release, single node", cp("v1.36.2", "v1.36.2"), "v1.36.3", nil, ""},
		{"the next minor, first control plane", cp("v1.36.3", "v1.36.3", "v1.36.3"), "v1.37.0", nil, ""},
		{"the next minor, second control plane after the first", cp("v1.36.3", "v1.37.0", "v1.36.3"), "v1.37.0", nil, ""},
		{"worker after every control plane", worker("v1.36.3", "v1.37.0", "v1.37.0"), "v1.37.0", nil, ""},
		{"not yet in a cluster", worker("v1.36.3"), "v1.37.1", nil, ""},
		{"downgrade", worker("v1.36.3", "v1.36.3"), "v1.36.2", ErrKubernetesDowngrade, "carries Kubernetes v1.36.2 and this node runs v1.36.3"},
		{"two minors", cp("v1.36.3", "v1.36.3"), "v1.38.0", ErrKubernetesSkipsMinor, "one minor version at a time"},
		{"another major", cp("v1.36.3"), "v2.0.0", ErrKubernetesSkipsMinor, "v2.0.0"},
		{"worker before the control planes", worker("v1.36.3", "v1.36.3", "v1.37.0", "v1.36.3"), "v1.37.0", ErrAPIServersBehind, "this node is a worker, and API servers run v1.36.3:"},
		{"worker a patch ahead: within the policy", worker("v1.36.2", "v1.36.2"), "v1.36.3", nil, ""},
		{"worker a minor ahead of one control plane", worker("v1.36.3", "v1.37.0", "v1.36.9"), "v1.37.0", ErrAPIServersBehind, "API servers run v1.36.9"},
		{"control plane two minors ahead of another", cp("v1.37.2", "v1.37.2", "v1.36.3"), "v1.38.0", ErrAPIServersBehind, "control plane, and API servers run v1.36.3"},
		{"bad target", worker("v1.36.3"), "latest", nil, "the upgrade's Kubernetes version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKubernetes(tt.skew, tt.target)
			if tt.err == nil && tt.says == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			if tt.err != nil {
				assert.ErrorIs(t, err, tt.err)
			}
			assert.Contains(t, err.Error(), tt.says)
		})
	}
}

func TestIsPatchUpgrade(t *testing.T) {
	for _, tt := range []struct {
		running, target string
		want            bool
	}{
		{"v1.36.2", "v1.36.3", true},
		{"v1.36.2", "v1.36.20", true},
		{"1.36.2", "v1.36.3", true},
		{"v1.36.3", "v1.36.3", false},
		{"v1.36.3", "v1.36.2", false},
		{"v1.36.3", "v1.37.0", false},
		{"v1.36.3", "v2.36.4", false},
		{"v1.36.2", "v1.36.3-rc.0", false},
		{"v1.36.3-rc.0", "v1.36.3", false},
		{"", "v1.36.3", false},
		{"v1.36.2", "latest", false},
	} {
		assert.Equal(t, tt.want, IsPatchUpgrade(tt.running, tt.target), "%s to %s", tt.running, tt.target)
	}
}
