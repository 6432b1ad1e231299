package kubeadmflow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// memLeases is the API's Leases, in memory: the join lock's store.
type memLeases struct {
	oneNode
	mu     sync.Mutex
	leases map[string]kubeclient.Lease
	nodes  []kubeclient.Node
}

func (m *memLeases) Nodes(context.Context) ([]kubeclient.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]kubeclient.Node(nil), m.nodes...), nil
}

func (m *memLeases) Lease(_ context.Context, ns, name string) (kubeclient.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[ns+"/"+name]
	if !ok {
		return kubeclient.Lease{}, fmt.Errorf("lease %s/%s: %w", ns, name, kubeclient.ErrNotFound)
	}
	return l, nil
}

func (m *memLeases) CreateLease(_ context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases == nil {
		m.leases = map[string]kubeclient.Lease{}
	}
	l.ResourceVersion = "1"
	m.leases[l.Namespace+"/"+l.Name] = l
	return l, nil
}

func (m *memLeases) UpdateLease(_ context.Context, l kubeclient.Lease) (kubeclient.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l.ResourceVersion += "1"
	m.leases[l.Namespace+"/"+l.Name] = l
	return l, nil
}

// upgradeFlow is a flow whose slot carries Kubernetes slot, whose
// journal records configured ("" for none), whose kubectl answers the
// cluster's ClusterConfiguration with clusterVersion, and which records
// every command.
// coreDNS is the CoreDNS the fake cluster runs and its slot carries.
const coreDNS = "registry.k8s.io/coredns/coredns:v1.14.2"

func upgradeFlow(t *testing.T, slot, configured, clusterVersion string) (*Flow, *[]string) {
	t.Helper()
	f := testFlow(t, nil)
	var mu sync.Mutex
	var cmds []string
	f.Host = &host.Host{Root: f.Root, Clock: f.Clock, Executor: host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		line := strings.TrimSpace(name + " " + strings.Join(args, " "))
		cmds = append(cmds, line)
		switch name {
		case "kubectl":
			if slices.Contains(args, "deployment") {
				return []byte(coreDNS), nil
			}
			return []byte("apiServer: {}\nkind: ClusterConfiguration\nkubernetesVersion: " + clusterVersion + "\n"), nil
		case "etcdctl":
			return nil, os.WriteFile(args[len(args)-1], []byte("snapshot"), 0o600)
		case "etcdutl":
			for _, a := range args {
				if dir, ok := strings.CutPrefix(a, "--data-dir="); ok {
					return nil, os.MkdirAll(filepath.Join(dir, "member"), 0o700)
				}
			}
		}
		return nil, nil
	})}
	write := func(p, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(p)), 0o755))
		require.NoError(t, os.WriteFile(f.Path(p), []byte(content), 0o600))
	}
	write(bundleIndex, `{"manifests":[{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:`+slot+`"}},`+
		`{"annotations":{"io.containerd.image.name":"`+coreDNS+`"}}]}`)
	write(ManifestsDir+"/kube-apiserver.yaml", "spec:\n  containers:\n  - command: [kube-apiserver]\n    image: registry.k8s.io/kube-apiserver:v1.36.3\n")
	write(ManifestsDir+"/etcd.yaml", "etcd static pod\n")
	write(ManifestsDir+"/kube-controller-manager.yaml", "kube-controller-manager static pod\n")
	write(ManifestsDir+"/kube-scheduler.yaml", "kube-scheduler static pod\n")
	write(KubeletConfigFile, "kind: KubeletConfiguration\n")
	if configured != "" {
		require.NoError(t, f.recordKubernetes(configured))
	}
	leases := &memLeases{nodes: []kubeclient.Node{{Name: "node-1", Ready: true, ControlPlane: true}, {Name: "w-1", Worker: true}}}
	f.Deps.API = func(string) (APIClient, error) { return leases, nil }
	return f, &cmds
}

func clusterNode(role string) *machineconfig.Config {
	return &machineconfig.Config{Hostname: "node-1", Cluster: &machineconfig.Cluster{Name: "lab", Role: role, NodeIP: "10.0.0.11"}}
}

func recorded(f *Flow) string {
	var v string
	f.State.Read(func(j *nodestate.Journal) { v = j.Kubernetes })
	return v
}

func TestKubernetesUpgrade(t *testing.T) {
	tests := []struct {
		name                string
		role                string
		configured, cluster string
		want                []string // the commands, in order (etcdctl by its verb)
		skipsPreflight      bool     // upgrade apply skips kubeadm's preflight
	}{
		{"worker", machineconfig.RoleWorker, "v1.36.3", "v1.36.4",
			[]string{"sync", "kubeadm upgrade node --config=" + UpgradeConfigFile, "sync", "systemctl restart kubelet.service"}, false},
		{"first control plane: snapshot, then upgrade apply", machineconfig.RoleInit, "v1.36.3", "v1.36.3",
			[]string{"sync", "kubectl", "kubectl coredns", "etcdctl snapshot save", "kubeadm upgrade apply --config=" + UpgradeConfigFile + " --yes", "sync", "systemctl restart kubelet.service"}, true},
		{"first control plane, a minor upgrade: kubeadm's preflight runs", machineconfig.RoleInit, "v1.35.2", "v1.35.2",
			[]string{"sync", "kubectl", "etcdctl snapshot save", "kubeadm upgrade apply --config=" + UpgradeConfigFile + " --yes", "sync", "systemctl restart kubelet.service"}, false},
		{"next control plane: upgrade node", machineconfig.RoleControlPlane, "v1.36.3", "v1.36.4",
			[]string{"sync", "kubectl", "kubeadm upgrade node --config=" + UpgradeConfigFile, "sync", "systemctl restart kubelet.service"}, false},
		{"control plane with no recorded version: read from its manifest", machineconfig.RoleControlPlane, "", "v1.36.4",
			[]string{"sync", "kubectl", "kubeadm upgrade node --config=" + UpgradeConfigFile, "sync", "systemctl restart kubelet.service"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, cmds := upgradeFlow(t, "v1.36.4", tt.configured, tt.cluster)
			c := clusterNode(tt.role)
			err := verifyKubernetesUpgrade(context.Background(), f, c)
			require.ErrorIs(t, err, errKubernetesBehind)
			from := tt.configured
			if from == "" {
				from = "v1.36.3" // its manifest's
			}
			assert.Contains(t, err.Error(), from+", the slot v1.36.4")

			require.NoError(t, applyKubernetesUpgrade(context.Background(), f, c))
			var got []string
			for _, cmd := range *cmds {
				switch {
				case strings.HasPrefix(cmd, "kubectl ") && strings.Contains(cmd, " deployment coredns "):
					cmd = "kubectl coredns"
				case strings.HasPrefix(cmd, "kubectl "):
					assert.Contains(t, cmd, "get configmap kubeadm-config --namespace=kube-system")
					cmd = "kubectl"
				case strings.HasPrefix(cmd, "etcdctl "):
					cmd = "etcdctl snapshot save"
				}
				got = append(got, cmd)
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, "v1.36.4", recorded(f), "the new version is recorded")
			cfg, err := os.ReadFile(f.Path(UpgradeConfigFile))
			require.NoError(t, err)
			assert.Contains(t, string(cfg), `kubernetesVersion: "v1.36.4"`)
			assert.Contains(t, string(cfg), `"CreateJob"]`, "kubeadm's one-minute Job check is a warning")
			assert.Equal(t, tt.skipsPreflight, strings.Contains(string(cfg), `skipPhases: ["preflight"]`), "%s", cfg)
			require.NoError(t, verifyKubernetesUpgrade(context.Background(), f, c), "verified after the upgrade")

			kept := f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, from))
			assert.FileExists(t, filepath.Join(kept, KubeletConfigFile), "the kubelet's configuration kept for a rollback")
			assert.FileExists(t, filepath.Join(kept, ManifestsDir, "kube-apiserver.yaml"), "the static pods kept for a rollback")
			applied := filepath.Join(kept, appliedMarker)
			if strings.Contains(strings.Join(tt.want, " "), "etcdctl") {
				snaps, err := filepath.Glob(f.Path(layout.EtcdSnapshotDir + "/*.db"))
				require.NoError(t, err)
				assert.Len(t, snaps, 1, "the etcd snapshot before upgrade apply")
				assert.FileExists(t, applied, "upgrade apply marked: a rollback puts the cluster's objects back")
			} else {
				assert.NoFileExists(t, applied, "upgrade node changes no cluster-wide object")
			}
		})
	}
}

// A patch upgrade's `upgrade apply` skips kubeadm's preflight only
// where the checks it stands in for pass; otherwise kubeadm's runs, and
// the journal says why.
func TestKubernetesUpgradeKeepsPreflightWhenTheClusterIsNotWell(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spoil func(t *testing.T, f *Flow, api *memLeases)
		why   string
	}{
		{"a control plane not Ready", func(_ *testing.T, _ *Flow, api *memLeases) {
			api.nodes = append(api.nodes, kubeclient.Node{Name: "cp-2", ControlPlane: true})
		}, "kubeadm's preflight runs: control plane cp-2 is not Ready"},
		{"a static pod manifest missing", func(t *testing.T, f *Flow, _ *memLeases) {
			require.NoError(t, os.Remove(f.Path(ManifestsDir+"/kube-scheduler.yaml")))
		}, "kubeadm's preflight runs: static pod kube-scheduler is missing"},
		{"CoreDNS moving to another version", func(t *testing.T, f *Flow, _ *memLeases) {
			require.NoError(t, os.WriteFile(f.Path(bundleIndex),
				[]byte(`{"manifests":[{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.4"}},`+
					`{"annotations":{"io.containerd.image.name":"registry.k8s.io/coredns/coredns:v1.14.3"}}]}`), 0o600))
		}, "kubeadm's preflight runs: CoreDNS moves from " + coreDNS + " to registry.k8s.io/coredns/coredns:v1.14.3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.3")
			var reports []string
			f.Report = host.ReporterFunc(func(_ string, _ step.Result, detail string) { reports = append(reports, detail) })
			api, err := f.API(AdminKubeconfig)
			require.NoError(t, err)
			tt.spoil(t, f, api.(*memLeases))
			require.NoError(t, applyKubernetesUpgrade(context.Background(), f, clusterNode(machineconfig.RoleInit)))
			cfg, err := os.ReadFile(f.Path(UpgradeConfigFile))
			require.NoError(t, err)
			assert.NotContains(t, string(cfg), "skipPhases")
			assert.Contains(t, strings.Join(reports, "\n"), tt.why)
		})
	}
}

func TestKubernetesUpgradeRefusals(t *testing.T) {
	t.Run("two minors ahead", func(t *testing.T) {
		f, cmds := upgradeFlow(t, "v1.38.0", "v1.36.3", "v1.36.3")
		err := applyKubernetesUpgrade(context.Background(), f, clusterNode(machineconfig.RoleWorker))
		require.ErrorIs(t, err, upgrade.ErrKubernetesSkipsMinor)
		assert.Empty(t, *cmds, "nothing ran")
		assert.Equal(t, "v1.36.3", recorded(f))
	})
	t.Run("same version: nothing to do", func(t *testing.T) {
		f, cmds := upgradeFlow(t, "v1.36.3", "v1.36.3", "v1.36.3")
		require.NoError(t, verifyKubernetesUpgrade(context.Background(), f, clusterNode(machineconfig.RoleInit)))
		require.NoError(t, applyKubernetesUpgrade(context.Background(), f, clusterNode(machineconfig.RoleInit)))
		assert.Empty(t, *cmds)
	})
	t.Run("a worker formed before the version was recorded runs upgrade node once", func(t *testing.T) {
		f, cmds := upgradeFlow(t, "v1.36.4", "", "v1.36.4")
		c := clusterNode(machineconfig.RoleWorker)
		require.ErrorIs(t, verifyKubernetesUpgrade(context.Background(), f, c), errKubernetesBehind)
		assert.Empty(t, recorded(f), "verify only looks")
		require.NoError(t, applyKubernetesUpgrade(context.Background(), f, c))
		assert.Equal(t, []string{"sync", "kubeadm upgrade node --config=" + UpgradeConfigFile, "sync", "systemctl restart kubelet.service"}, *cmds)
		assert.Equal(t, "v1.36.4", recorded(f))
		assert.DirExists(t, f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, "unrecorded")))
		require.NoError(t, verifyKubernetesUpgrade(context.Background(), f, c))
	})
	t.Run("a failed kubeadm leaves the old version recorded, and the kept copy is the first one", func(t *testing.T) {
		f, _ := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.4")
		f.Host.Executor = host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
			if name == "kubeadm" {
				return []byte("[upgrade] FATAL"), fmt.Errorf("exit status 1")
			}
			return nil, nil
		})
		c := clusterNode(machineconfig.RoleWorker)
		err := applyKubernetesUpgrade(context.Background(), f, c)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "upgrade Kubernetes from v1.36.3 to v1.36.4")
		assert.Equal(t, "v1.36.3", recorded(f))
		// What the failed run may have changed is not what a rerun keeps.
		require.NoError(t, os.WriteFile(f.Path(KubeletConfigFile), []byte("changed by the failed upgrade"), 0o600))
		_ = applyKubernetesUpgrade(context.Background(), f, c)
		b, err := os.ReadFile(f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, "v1.36.3", KubeletConfigFile)))
		require.NoError(t, err)
		assert.Equal(t, "kind: KubeletConfiguration\n", string(b))
	})
}

// After a rollback, the old slot puts back what the new slot's Kubernetes
// upgrade changed: the kept manifests and kubelet configuration, a static
// pod the upgrade added removed; the kubelet restarts; the old version is
// recorded; the copy is gone, and a second call does nothing.
func TestRestoreBeforeUpgrade(t *testing.T) {
	f, cmds := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.3")
	c := clusterNode(machineconfig.RoleInit)
	before := map[string]string{}
	for _, p := range []string{ManifestsDir + "/kube-apiserver.yaml", ManifestsDir + "/etcd.yaml", KubeletConfigFile} {
		b, err := os.ReadFile(f.Path(p))
		require.NoError(t, err)
		before[p] = string(b)
	}
	require.NoError(t, applyKubernetesUpgrade(context.Background(), f, c))
	// What kubeadm upgrade apply changed and added.
	require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/kube-apiserver.yaml"), []byte("image: registry.k8s.io/kube-apiserver:v1.36.4\n"), 0o600))
	require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/new-addon.yaml"), []byte("added\n"), 0o600))
	require.NoError(t, os.WriteFile(f.Path(KubeletConfigFile), []byte("kind: KubeletConfiguration\nnew: true\n"), 0o600))
	assert.Equal(t, "v1.36.4", recorded(f))

	// The old slot boots again: its bundle carries v1.36.3.
	require.NoError(t, os.WriteFile(f.Path(bundleIndex), []byte(`{"manifests":[{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}}]}`), 0o644))
	*cmds = nil
	restored, err := f.RestoreBeforeUpgrade(context.Background())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{ManifestsDir + "/kube-apiserver.yaml", KubeletConfigFile, ManifestsDir + "/new-addon.yaml (removed)",
		"the cluster's kubeadm objects (once the API is up)"}, restored)
	for p, want := range before {
		b, err := os.ReadFile(f.Path(p))
		require.NoError(t, err)
		assert.Equal(t, want, string(b), p)
	}
	assert.NoFileExists(t, f.Path(ManifestsDir+"/new-addon.yaml"))
	assert.Equal(t, []string{"sync", "systemctl restart kubelet.service"}, *cmds)
	assert.Equal(t, "v1.36.3", recorded(f))
	assert.NoDirExists(t, f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, "v1.36.3")))

	// This node ran upgrade apply: once its API answers, the cluster's
	// kubeadm objects go back to v1.36.3 with this slot's kubeadm.
	require.ErrorIs(t, verifyKubernetesUpgrade(context.Background(), f, c), errClusterRestorePending)
	f.Deps.Probe = func(string) (ProbeFunc, func()) {
		return func(context.Context, string) (int, []byte, error) { return 200, nil, nil }, func() {}
	}
	*cmds = nil
	require.NoError(t, applyKubernetesUpgrade(context.Background(), f, c))
	assert.Equal(t, []string{
		"kubeadm init phase upload-config all --config=" + ClusterRestoreConfigFile,
		"kubeadm init phase addon all --config=" + ClusterRestoreConfigFile,
	}, *cmds)
	cfg, err := os.ReadFile(f.Path(ClusterRestoreConfigFile))
	require.NoError(t, err)
	assert.Contains(t, string(cfg), "kind: InitConfiguration")
	assert.Contains(t, string(cfg), `kubernetesVersion: "v1.36.3"`)
	assert.NoFileExists(t, f.Path(layout.KubernetesClusterRestoreFile))
	require.NoError(t, verifyKubernetesUpgrade(context.Background(), f, c), "the old slot's version is the node's and the cluster's again")

	*cmds = nil
	restored, err = f.RestoreBeforeUpgrade(context.Background())
	require.NoError(t, err)
	assert.Empty(t, restored)
	assert.Empty(t, *cmds)
}

// An etcd whose data an upgrade moved to a newer minor version is not
// rolled back with the manifests: the older etcd would refuse that data.
// A patch-level etcd change is rolled back.
func TestRestoreBeforeUpgradeKeepsANewerEtcdMinor(t *testing.T) {
	for _, tc := range []struct {
		name, now string
		restored  bool
	}{
		{"a newer minor stays", "3.7.0-0", false},
		{"a newer patch goes back", "3.6.9-0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := upgradeFlow(t, "v1.36.3", "v1.36.4", "v1.36.4")
			kept := f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, "v1.36.3", ManifestsDir, "etcd.yaml"))
			require.NoError(t, os.MkdirAll(filepath.Dir(kept), 0o700))
			require.NoError(t, os.WriteFile(kept, []byte("image: registry.k8s.io/etcd:3.6.8-0\n"), 0o600))
			now := "image: registry.k8s.io/etcd:" + tc.now + "\n"
			require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/etcd.yaml"), []byte(now), 0o600))
			restored, err := f.RestoreBeforeUpgrade(context.Background())
			require.NoError(t, err)
			b, err := os.ReadFile(f.Path(ManifestsDir + "/etcd.yaml"))
			require.NoError(t, err)
			if tc.restored {
				assert.Equal(t, "image: registry.k8s.io/etcd:3.6.8-0\n", string(b))
				assert.Contains(t, restored, ManifestsDir+"/etcd.yaml")
			} else {
				assert.Equal(t, now, string(b), "the newer etcd runs on until etcd is restored")
				assert.Contains(t, restored, ManifestsDir+"/etcd.yaml (etcd's data moved to a newer minor version: restored from its pre-upgrade snapshot once the node's phases run)")
				assert.True(t, etcdRestorePending(f))
			}
		})
	}
}

// stoppedRuntime finds no container running.
type stoppedRuntime struct{ noRuntime }

func (stoppedRuntime) Running(context.Context, string, string) (bool, error) { return false, nil }

// An upgrade that moved etcd to a newer minor version and rolled back: a
// single control plane stops etcd, restores its data from the snapshot
// taken before the upgrade and runs the etcd of before; with several
// control planes etcd stays, and the console says where the snapshot is.
func TestEtcdRestoredAfterARollback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		planes   []string
		restored bool
	}{
		{"one control plane", nil, true},
		{"three control planes", []string{"10.0.0.11", "10.0.0.12", "10.0.0.13"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, cmds := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.3")
			c := clusterNode(machineconfig.RoleInit)
			c.Cluster.ControlPlanes = tc.planes
			const before = "image: registry.k8s.io/etcd:3.6.8-0\n"
			require.NoError(t, os.WriteFile(f.Path(layout.EtcdManifest), []byte(before), 0o600))
			require.NoError(t, applyKubernetesUpgrade(context.Background(), f, c))
			snaps, err := filepath.Glob(f.Path(layout.EtcdSnapshotDir + "/*.db"))
			require.NoError(t, err)
			require.Len(t, snaps, 1)
			// The upgrade moved etcd to 3.7; then the old slot boots again.
			const newer = "image: registry.k8s.io/etcd:3.7.0-0\n"
			require.NoError(t, os.WriteFile(f.Path(layout.EtcdManifest), []byte(newer), 0o600))
			require.NoError(t, os.WriteFile(f.Path(bundleIndex), []byte(`{"manifests":[{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.3"}}]}`), 0o644))
			_, err = f.RestoreBeforeUpgrade(context.Background())
			require.NoError(t, err)
			require.Error(t, verifyKubernetesUpgrade(context.Background(), f, c), "the restores are pending")

			f.Runtime = stoppedRuntime{}
			f.Deps.Probe = func(string) (ProbeFunc, func()) {
				return func(context.Context, string) (int, []byte, error) { return 200, nil, nil }, func() {}
			}
			*cmds = nil
			require.NoError(t, applyKubernetesUpgrade(context.Background(), f, c))
			b, err := os.ReadFile(f.Path(layout.EtcdManifest))
			require.NoError(t, err)
			var etcdutl []string
			for _, cmd := range *cmds {
				if strings.HasPrefix(cmd, "etcdutl ") {
					etcdutl = append(etcdutl, cmd)
				}
			}
			if tc.restored {
				assert.Equal(t, before, string(b), "the etcd of before the upgrade")
				require.Len(t, etcdutl, 1)
				assert.Contains(t, etcdutl[0], "etcdutl snapshot restore "+f.Path(strings.TrimPrefix(snaps[0], f.Root)))
				assert.Contains(t, etcdutl[0], "--initial-cluster=node-1=https://10.0.0.11:2380")
			} else {
				assert.Equal(t, newer, string(b), "etcd stays at the newer version")
				assert.Empty(t, etcdutl)
			}
			assert.NoDirExists(t, f.Path(layout.EtcdRestoreDir))
			require.NoError(t, verifyKubernetesUpgrade(context.Background(), f, c))
		})
	}
}
