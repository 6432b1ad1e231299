package kubeadmflow

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
)

// addonsNode is a control plane of a cluster with every add-on on, its
// slot's bundle naming flannel's image tag; its cluster CA is peer's, or
// a new one.
func addonsNode(t *testing.T, flannelTag, release string, peer *Flow) (*Flow, *machineconfig.Config) {
	t.Helper()
	f := testFlow(t, nil)
	write(t, f, bundleIndex, 0o600, `{"manifests":[`+
		`{"annotations":{"io.containerd.image.name":"docker.io/flannel/flannel:`+flannelTag+`"}}]}`)
	withRelease(t, f, release)
	if peer == nil {
		clusterCA(t, f)
	} else {
		for _, name := range []string{"ca.crt", "ca.key"} {
			b, err := os.ReadFile(peer.Path(KubernetesPKIDir + "/" + name))
			require.NoError(t, err)
			write(t, f, KubernetesPKIDir+"/"+name, 0o600, string(b))
		}
	}
	c := initNode()
	c.Cluster.Role = machineconfig.RoleControlPlane
	c.Cluster.LoadBalancer = &machineconfig.LoadBalancer{Addresses: []string{"10.77.0.100-10.77.0.120"}}
	return f, c
}

// appliedKinds are the kinds of the objects in the manifests applied.
func appliedKinds(api *recordingAPI) string {
	var kinds []string
	for _, m := range api.applied {
		kinds = append(kinds, kindsOf([]byte(m)))
	}
	return strings.Join(kinds, " ")
}

// kindsOf are the kinds of a manifest's objects, in order.
func kindsOf(m []byte) string {
	var kinds []string
	for _, l := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(l, "kind: ") {
			kinds = append(kinds, strings.TrimPrefix(l, "kind: "))
		}
	}
	return strings.Join(kinds, " ")
}

// The cluster-addons phase: a control plane applies each add-on the
// record does not have as its slot renders it, records it, and then
// verifies; a slot with a newer add-on applies that one alone; a slot
// older than the one that applied an add-on leaves it.
func TestClusterAddonsPhase(t *testing.T) {
	ctx := context.Background()
	api := &recordingAPI{}
	f, c := addonsNode(t, "v0.28.10", "0.3.0", nil)
	f.API = func(string) (APIClient, error) { return api, nil }
	p := f.addonsPhase()

	// A cluster formed before the record: every add-on, once.
	err := p.Verify(ctx, c)
	require.ErrorIs(t, err, errAddonsBehind)
	assert.ErrorContains(t, err, "pod-network, cluster-dns, upgrade-coordination, local-storage, metrics, load-balancer")
	got := reports(f)
	require.NoError(t, p.Apply(ctx, c))
	require.NoError(t, p.Verify(ctx, c))
	assert.Len(t, api.record, 6)
	for _, k := range []string{"DaemonSet", "StorageClass", "APIService", "IPAddressPool"} {
		assert.Contains(t, appliedKinds(api), k)
	}
	assert.Contains(t, strings.Join(*got, "\n"), "add-on metrics: done: sha256:")
	var rec addonRecord
	require.NoError(t, json.Unmarshal([]byte(api.record[addonPodNetwork]), &rec))
	assert.Equal(t, "0.3.0", rec.Release)
	assert.Equal(t, "cp-1", rec.Node)

	// Applied again, nothing changes: metrics-server's new pair is no
	// new add-on.
	api.applied = nil
	require.NoError(t, p.Apply(ctx, c))
	assert.Empty(t, api.applied)

	// An upgrade brings a slot with another flannel: the pod network
	// alone is applied again.
	newer, c2 := addonsNode(t, "v0.29.0", "0.4.0", f)
	c2.Hostname = "cp-2"
	newer.API = f.API
	p2 := newer.addonsPhase()
	err = p2.Verify(ctx, c2)
	require.ErrorIs(t, err, errAddonsBehind)
	assert.ErrorContains(t, err, ": pod-network")
	require.NoError(t, p2.Apply(ctx, c2))
	require.Equal(t, "Namespace ServiceAccount ClusterRole ClusterRoleBinding ConfigMap DaemonSet ServiceAccount ClusterRole ClusterRoleBinding DaemonSet", appliedKinds(api),
		"flannel's and kube-network-policies' manifests")
	assert.Contains(t, api.applied[0], "docker.io/flannel/flannel:v0.29.0")
	require.NoError(t, p2.Verify(ctx, c2))

	// The node not yet upgraded boots again: it keeps the newer pod
	// network, and says so only if it has something else to do.
	api.applied = nil
	require.NoError(t, p.Verify(ctx, c), "a newer release's add-on is no reason to heal")
	require.NoError(t, p.Apply(ctx, c))
	assert.Empty(t, api.applied)
	require.NoError(t, json.Unmarshal([]byte(api.record[addonPodNetwork]), &rec))
	assert.Equal(t, "0.4.0", rec.Release)

	// cp-2's upgrade rolls back: its older slot takes the pod network
	// back, whose newer images no node holds any more.
	older, c3 := addonsNode(t, "v0.28.10", "0.3.0", f)
	c3.Hostname = "cp-2"
	older.API = f.API
	p3 := older.addonsPhase()
	err = p3.Verify(ctx, c3)
	require.ErrorIs(t, err, errAddonsBehind)
	assert.ErrorContains(t, err, ": pod-network")
	require.NoError(t, p3.Apply(ctx, c3))
	assert.Contains(t, api.applied[0], "docker.io/flannel/flannel:v0.28.10")
	require.NoError(t, json.Unmarshal([]byte(api.record[addonPodNetwork]), &rec))
	assert.Equal(t, addonRecord{Fingerprint: rec.Fingerprint, Release: "0.3.0", Node: "cp-2"}, rec)
	require.NoError(t, p.Verify(ctx, c), "cp-1 finds what it renders")
	api.applied = nil

	// An entry that does not parse, or names no version that parses, is
	// applied again.
	api.record[addonClusterDNS] = "{"
	api.record[addonUpgrades] = `{"fingerprint":"sha256:00","release":"someday"}`
	err = p.Verify(ctx, c)
	require.ErrorIs(t, err, errAddonsBehind)
	assert.ErrorContains(t, err, ": cluster-dns, upgrade-coordination")
	require.NoError(t, p.Apply(ctx, c))
	assert.Equal(t, "ConfigMap "+kindsOf(addons.Upgrades), appliedKinds(api), "CoreDNS's configuration, then the upgrades' rights")
	require.NoError(t, p.Verify(ctx, c))
}

// A control plane that runs a staged slot's Kubernetes in place applies
// the add-ons as that slot's bundle renders them and records that slot's
// release, not the booted one's: a control plane still on the booted
// release leaves them.
func TestClusterAddonsPhaseInPlace(t *testing.T) {
	ctx := context.Background()
	api := &recordingAPI{}
	f, c := addonsNode(t, "v0.28.10", "0.3.0", nil)
	f.API = func(string) (APIClient, error) { return api, nil }
	require.NoError(t, f.addonsPhase().Apply(ctx, c))

	write(t, f, filepath.Join(layout.InPlaceSlotDir, bundleIndex), 0o600, `{"manifests":[`+
		`{"annotations":{"io.containerd.image.name":"docker.io/flannel/flannel:v0.29.0"}}]}`)
	write(t, f, filepath.Join(layout.InPlaceSlotDir, layout.ReleaseFile), 0o644, `{"name":"terrarium","version":"0.4.0"}`)
	f.SetKubernetesRoot(layout.InPlaceSlotDir)
	api.applied = nil
	got := reports(f)
	require.NoError(t, f.addonsPhase().Apply(ctx, c))
	require.NotEmpty(t, api.applied)
	assert.Contains(t, api.applied[0], "docker.io/flannel/flannel:v0.29.0")
	var rec addonRecord
	require.NoError(t, json.Unmarshal([]byte(api.record[addonPodNetwork]), &rec))
	assert.Equal(t, addonRecord{Fingerprint: rec.Fingerprint, Release: "0.4.0", Node: "cp-1"}, rec)
	assert.Contains(t, strings.Join(*got, "\n"), "add-on pod-network: started: as release 0.4.0 renders it")

	older, c2 := addonsNode(t, "v0.28.10", "0.3.0", f)
	c2.Hostname = "cp-2"
	older.API = f.API
	api.applied = nil
	require.NoError(t, older.addonsPhase().Apply(ctx, c2))
	assert.Empty(t, api.applied, "release 0.4.0's pod network, newer than cp-2's")
}

// A worker keeps no add-ons and asks no API; a control plane whose API
// does not answer fails the phase with the reason.
func TestClusterAddonsPhaseRoles(t *testing.T) {
	ctx := context.Background()
	f, c := addonsNode(t, "v0.28.10", "0.3.0", nil)
	asked := 0
	f.API = func(string) (APIClient, error) { asked++; return nil, errors.New("connection refused") }
	p := f.addonsPhase()
	w := *c
	wc := *c.Cluster
	wc.Role = machineconfig.RoleWorker
	w.Cluster = &wc
	require.NoError(t, p.Verify(ctx, &w))
	require.NoError(t, p.Apply(ctx, &w))
	require.NoError(t, p.Verify(ctx, &machineconfig.Config{}))
	assert.Zero(t, asked)
	assert.ErrorContains(t, p.Verify(ctx, c), "connection refused")
	assert.ErrorContains(t, p.Apply(ctx, c), "connection refused")
}

// The fingerprint of parts is not that of the same bytes cut otherwise.
func TestFingerprintParts(t *testing.T) {
	assert.NotEqual(t, fingerprint([]byte("ab"), []byte("c")), fingerprint([]byte("a"), []byte("bc")))
	assert.Equal(t, fingerprint([]byte("ab")), fingerprint([]byte("ab")))
	assert.True(t, strings.HasPrefix(fingerprint(nil), "sha256:"))
}
