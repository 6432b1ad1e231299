package kubeadmflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// recordingAPI keeps the manifests applied to it and their field
// managers, apart from the add-ons' record, which it keeps as the API
// would: each add-on's key merged into the ConfigMap.
type recordingAPI struct {
	oneNode
	applied, managers []string
	record            map[string]string
}

func (r *recordingAPI) ApplyManifest(_ context.Context, m []byte, fieldManager string) error {
	if strings.HasPrefix(fieldManager, addonRecordManager) {
		var cm struct {
			Kind     string
			Metadata struct{ Namespace, Name string }
			Data     map[string]string
		}
		if err := json.Unmarshal(m, &cm); err != nil {
			return err
		}
		if cm.Kind != "ConfigMap" || cm.Metadata.Namespace != AddonsRecordNamespace || cm.Metadata.Name != AddonsRecordName {
			return fmt.Errorf("the record applied as %s/%s %s", cm.Metadata.Namespace, cm.Metadata.Name, cm.Kind)
		}
		if len(cm.Data) != 1 || fieldManager != addonRecordManager+slices.Collect(maps.Keys(cm.Data))[0] {
			return fmt.Errorf("manager %s applied keys %v: one add-on's key under its own manager", fieldManager, cm.Data)
		}
		if r.record == nil {
			r.record = map[string]string{}
		}
		maps.Copy(r.record, cm.Data)
		return nil
	}
	r.applied = append(r.applied, string(m))
	r.managers = append(r.managers, fieldManager)
	return nil
}

func (r *recordingAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	if ns != AddonsRecordNamespace || name != AddonsRecordName || r.record == nil {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	return kubeclient.ConfigMap{Namespace: ns, Name: name, Data: maps.Clone(r.record)}, nil
}

// withRelease writes the slot's release.json, version v.
func withRelease(t *testing.T, f *Flow, v string) {
	t.Helper()
	write(t, f, layout.ReleaseFile, 0o644, `{"name":"terrarium","version":"`+v+`"}`)
}

// runInitStep runs the init node's step of this name.
func runInitStep(ctx context.Context, t *testing.T, f *Flow, c *machineconfig.Config, name string) error {
	t.Helper()
	for _, st := range steps(c.Cluster) {
		if st.name == name {
			return st.own(ctx, f, c)
		}
	}
	t.Fatalf("the init node has no step %q", name)
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

// The init node's pod network step applies flannel's manifest, then
// kube-network-policies', both naming the images its bundle carries and
// the node's API balancer, and records the add-on; nothing is written to
// disk.
func TestInitNodeAppliesPodNetwork(t *testing.T) {
	ctx := context.Background()
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[`+
		`{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}},`+
		`{"annotations":{"io.containerd.image.name":"docker.io/flannel/flannel:v0.28.10"}},`+
		`{"annotations":{"io.containerd.image.name":"registry.k8s.io/networking/kube-network-policies:v0.9.1"}}]}`)
	withRelease(t, f, "0.3.0")
	c := initNode()
	api := &recordingAPI{}
	f.API = func(string) (APIClient, error) { return api, nil }
	require.NoError(t, runInitStep(ctx, t, f, c, "pod network (flannel)"))

	require.Len(t, api.applied, 2)
	assert.Contains(t, api.applied[0], `"Network": "10.244.0.0/16"`, "flannel's, with the cluster's pod CIDR")
	assert.Contains(t, api.applied[0], "docker.io/flannel/flannel:v0.28.10", "the bundle's flannel")
	assert.Contains(t, api.applied[1], "image: registry.k8s.io/networking/kube-network-policies:v0.9.1\n", "the bundle's image")
	assert.Contains(t, api.applied[1], `value: "7445"`, "the API through the node's balancer")
	assert.Equal(t, []string{AddonFieldManager, AddonFieldManager}, api.managers)
	var rec addonRecord
	require.NoError(t, json.Unmarshal([]byte(api.record[addonPodNetwork]), &rec))
	assert.Equal(t, addonRecord{Fingerprint: fingerprint([]byte(api.applied[0]), []byte(api.applied[1])), Release: "0.3.0", Node: "cp-1"}, rec)
	assert.NoDirExists(t, f.Path("/etc/terrarium/addons"), "the manifests are applied from memory")
}

// A bundle without a kube-network-policies image gets the default name.
func TestNetworkPolicyImageDefault(t *testing.T) {
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[{"annotations":{"io.containerd.image.name":"docker.io/flannel/flannel:v0.28.10"}}]}`)
	assert.Equal(t, "registry.k8s.io/networking/kube-network-policies:v0.8.0", networkPolicyImage(f))
	assert.Equal(t, "docker.io/flannel/flannel:v0.28.10", flannelImage(f))
}

// The init node applies local-path-provisioner's manifest with the
// bundle's image after the cluster's own add-ons, unless the cluster
// config switches local storage off; other roles never apply it.
func TestInitNodeAppliesLocalStorage(t *testing.T) {
	ctx := context.Background()
	for _, disabled := range []bool{false, true} {
		f := testFlow(t, nil)
		write(t, f, bundleIndex, 0o600, `{"manifests":[`+
			`{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}},`+
			`{"annotations":{"io.containerd.image.name":"docker.io/rancher/local-path-provisioner:v0.0.31"}}]}`)
		withRelease(t, f, "0.3.0")
		c := initNode()
		if disabled {
			c.Cluster.LocalStorage = &machineconfig.LocalStorage{Disabled: true}
		}
		names := stepNames(c.Cluster)
		if disabled {
			assert.NotContains(t, names, stepLocalStorage)
			continue
		}
		require.Contains(t, names, stepLocalStorage)
		assert.Equal(t, []string{stepLocalStorage, stepMetrics, "admin kubeconfig"}, names[len(names)-3:], "the admin kubeconfig stays last")

		api := &recordingAPI{}
		f.API = func(string) (APIClient, error) { return api, nil }
		require.NoError(t, runInitStep(ctx, t, f, c, stepLocalStorage))
		require.Len(t, api.applied, 1)
		assert.Contains(t, api.applied[0], "image: docker.io/rancher/local-path-provisioner:v0.0.31\n", "the bundle's image")
		assert.Contains(t, api.applied[0], `"paths": ["/var/lib/terrarium/volumes"]`)
		assert.Contains(t, api.record, addonLocalStorage)
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
	withRelease(t, f, "0.3.0")
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
	assert.Contains(t, api.record, addonMetrics)
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
