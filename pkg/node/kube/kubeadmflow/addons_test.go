package kubeadmflow

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
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

// stepNames are the names of a role's steps, in order.
func stepNames(c *machineconfig.Cluster) []string {
	var names []string
	for _, st := range steps(c) {
		names = append(names, st.name)
	}
	return names
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

// The init node writes local-path-provisioner's manifest with the bundle's
// image and applies it after the cluster's own add-ons, unless the cluster
// config switches local storage off; other roles never apply it.
func TestInitNodeAppliesLocalStorage(t *testing.T) {
	ctx := context.Background()
	for _, disabled := range []bool{false, true} {
		f := testFlow(t, nil)
		write(t, f, bundleIndex, 0o600, `{"manifests":[`+
			`{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}},`+
			`{"annotations":{"io.containerd.image.name":"docker.io/rancher/local-path-provisioner:v0.0.31"}}]}`)
		write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
		c := initNode()
		if disabled {
			c.Cluster.LocalStorage = &machineconfig.LocalStorage{Disabled: true}
		}
		require.NoError(t, applyKubeadmConfig(ctx, f, c))
		names := stepNames(c.Cluster)
		if disabled {
			assert.NoFileExists(t, f.Path(LocalPathManifest))
			assert.NotContains(t, names, stepLocalStorage)
			continue
		}
		lp, err := os.ReadFile(f.Path(LocalPathManifest))
		require.NoError(t, err)
		assert.Contains(t, string(lp), "image: docker.io/rancher/local-path-provisioner:v0.0.31\n", "the bundle's image")
		assert.Contains(t, string(lp), `"paths": ["/var/lib/terrarium/volumes"]`)
		require.NoError(t, checkMode(f, LocalPathManifest, ownerOnly))
		require.Contains(t, names, stepLocalStorage)
		assert.Equal(t, []string{stepLocalStorage, stepMetrics, "admin kubeconfig"}, names[len(names)-3:], "the admin kubeconfig stays last")

		api := &recordingAPI{}
		f.API = func(string) (APIClient, error) { return api, nil }
		for _, st := range steps(c.Cluster) {
			if st.name == stepLocalStorage {
				require.NoError(t, st.own(ctx, f, c))
			}
		}
		assert.Equal(t, []string{string(lp)}, api.applied)
	}
	for _, role := range []string{machineconfig.RoleControlPlane, machineconfig.RoleWorker} {
		assert.NotContains(t, stepNames(&machineconfig.Cluster{Role: role}), stepLocalStorage, role)
	}
}

// The init node issues metrics-server's serving pair from the cluster CA
// and applies the manifest, which it never writes to disk; a cluster
// config without metrics has no such step, nor has any other role.
func TestInitNodeAppliesMetricsServer(t *testing.T) {
	ctx := context.Background()
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[`+
		`{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}},`+
		`{"annotations":{"io.containerd.image.name":"registry.k8s.io/metrics-server/metrics-server:v0.8.1"}}]}`)
	clusterCA(t, f)
	c := initNode()
	var step *kubeadmStep
	for _, st := range steps(c.Cluster) {
		if st.name == stepMetrics {
			step = &st
		}
	}
	require.NotNil(t, step)
	api := &recordingAPI{}
	f.API = func(string) (APIClient, error) { return api, nil }
	require.NoError(t, step.own(ctx, f, c))
	require.Len(t, api.applied, 1)
	assert.Contains(t, api.applied[0], "image: registry.k8s.io/metrics-server/metrics-server:v0.8.1\n", "the bundle's image")
	assert.Contains(t, api.applied[0], "kind: APIService")
	assert.Contains(t, api.applied[0], "tls.key: ")
	assert.Equal(t, []string{AddonFieldManager}, api.managers)
	err := filepath.WalkDir(f.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "metrics-server-tls", "%s: the manifest with its key is on no disk", p)
		return nil
	})
	require.NoError(t, err)

	c.Cluster.Metrics = &machineconfig.Metrics{Disabled: true}
	for _, st := range steps(c.Cluster) {
		assert.NotEqual(t, stepMetrics, st.name)
	}
	for _, role := range []string{machineconfig.RoleControlPlane, machineconfig.RoleWorker} {
		for _, st := range steps(&machineconfig.Cluster{Role: role}) {
			assert.NotEqual(t, stepMetrics, st.name, role)
		}
	}

	// Without the CA the step fails, naming it, and applies nothing.
	require.NoError(t, os.Remove(f.Path(KubernetesPKIDir+"/ca.key")))
	api.applied = nil
	assert.ErrorContains(t, step.own(ctx, f, initNode()), "metrics-server: the cluster CA")
	assert.Empty(t, api.applied)
}
