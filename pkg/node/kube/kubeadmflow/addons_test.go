package kubeadmflow

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// recordingAPI keeps the manifests applied to it, and their field
// managers.
type recordingAPI struct {
	oneNode
	applied, managers []string
}

func (r *recordingAPI) ApplyManifest(_ context.Context, m []byte, fieldManager string) error {
	r.applied = append(r.applied, string(m))
	r.managers = append(r.managers, fieldManager)
	return nil
}

func initNode() *machineconfig.Config {
	return &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Name: "lab", Role: machineconfig.RoleInit,
		NodeIP: "10.77.0.10", ControlPlanes: []string{"10.77.0.10"}, PodCIDR: "10.244.0.0/16", CACertHash: "sha256:00",
		Token: "abcdef.0123456789abcdef"}}
}

// The init node writes kube-network-policies' manifest beside flannel's,
// root's alone, naming the image its bundle carries and the node's API
// balancer; its pod network step applies both, flannel's first.
func TestInitNodeAppliesNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[`+
		`{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}},`+
		`{"annotations":{"io.containerd.image.name":"docker.io/flannel/flannel:v0.28.10"}},`+
		`{"annotations":{"io.containerd.image.name":"registry.k8s.io/networking/kube-network-policies:v0.9.1"}}]}`)
	write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
	c := initNode()
	require.NoError(t, applyKubeadmConfig(ctx, f, c))

	np, err := os.ReadFile(f.Path(NetworkPolicyManifest))
	require.NoError(t, err)
	assert.Contains(t, string(np), "image: registry.k8s.io/networking/kube-network-policies:v0.9.1\n", "the bundle's image")
	assert.Contains(t, string(np), `value: "7445"`, "the API through the node's balancer")
	require.NoError(t, checkMode(f, NetworkPolicyManifest, ownerOnly))
	flannel, err := os.ReadFile(f.Path(FlannelManifest))
	require.NoError(t, err)

	api := &recordingAPI{}
	f.API = func(string) (APIClient, error) { return api, nil }
	var podNetwork *kubeadmStep
	for _, st := range steps(c.Cluster) {
		if st.name == "pod network (flannel)" {
			podNetwork = &st
		}
	}
	require.NotNil(t, podNetwork, "the init node's steps have a pod network step")
	require.NoError(t, podNetwork.own(ctx, f, c))
	assert.Equal(t, []string{string(flannel), string(np)}, api.applied)
	assert.Equal(t, []string{AddonFieldManager, AddonFieldManager}, api.managers)
}

// A bundle without a kube-network-policies image gets the default name.
func TestNetworkPolicyImageDefault(t *testing.T) {
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[{"annotations":{"io.containerd.image.name":"docker.io/flannel/flannel:v0.28.10"}}]}`)
	assert.Equal(t, "registry.k8s.io/networking/kube-network-policies:v0.8.0", networkPolicyImage(f))
	assert.Equal(t, "docker.io/flannel/flannel:v0.28.10", flannelImage(f))
}
