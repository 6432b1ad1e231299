package kubeadmflow

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
)

// staticPod is a static pod's manifest as kubeadm writes it, its image
// at tag.
func staticPod(pod, tag string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + pod + "\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - " + pod +
		"\n    image: registry.k8s.io/" + pod + ":" + tag + "\n    imagePullPolicy: IfNotPresent\n    name: " + pod + "\n"
}

const etcdPod = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - image: registry.k8s.io/etcd:3.6.5-0\n"

func TestPrestartControlPlane(t *testing.T) {
	tests := []struct {
		name             string
		slot, configured string
		worker           bool
		moved            bool
	}{
		{name: "patch upgrade", slot: "v1.36.4", configured: "v1.36.3", moved: true},
		{name: "minor upgrade: kubeadm moves it", slot: "v1.37.0", configured: "v1.36.3"},
		{name: "the slot's own Kubernetes", slot: "v1.36.3", configured: "v1.36.3"},
		{name: "rollback to an older slot", slot: "v1.36.2", configured: "v1.36.3"},
		{name: "a journal that records no version", slot: "v1.36.4", configured: ""},
		{name: "a journal that records another version", slot: "v1.36.4", configured: "v1.36.2"},
		{name: "worker", slot: "v1.36.4", configured: "v1.36.3", worker: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, cmds := upgradeFlow(t, tt.slot, tt.configured, "v1.36.3")
			before := map[string]string{ManifestsDir + "/etcd.yaml": etcdPod}
			for _, pod := range controlPlanePods {
				before[ManifestsDir+"/"+pod+".yaml"] = staticPod(pod, "v1.36.3")
			}
			if tt.worker {
				before = nil
				require.NoError(t, os.RemoveAll(f.Path(ManifestsDir)))
				require.NoError(t, os.MkdirAll(f.Path(ManifestsDir), 0o700))
			}
			for p, b := range before {
				require.NoError(t, os.WriteFile(f.Path(p), []byte(b), 0o600))
			}

			did, err := PrestartControlPlane(context.Background(), f.Host)
			require.NoError(t, err)
			kept := f.Path(filepath.Join(layout.KubernetesBeforeUpgradeDir, "v1.36.3"))
			open, err := unpackwindow.IsOpen(f.Host)
			require.NoError(t, err)
			if !tt.moved {
				assert.Empty(t, did)
				for p, b := range before {
					got, err := os.ReadFile(f.Path(p))
					require.NoError(t, err)
					assert.Equal(t, b, string(got), "%s untouched", p)
				}
				assert.NoDirExists(t, kept, "nothing kept")
				assert.False(t, open, "the image unpack window stays closed")
				assert.Empty(t, *cmds)
				return
			}
			assert.Contains(t, did, "start on Kubernetes v1.36.4")
			for _, pod := range controlPlanePods {
				p := ManifestsDir + "/" + pod + ".yaml"
				got, err := os.ReadFile(f.Path(p))
				require.NoError(t, err)
				assert.Equal(t, staticPod(pod, "v1.36.4"), string(got), "%s moved to the slot's tag, nothing else", p)
				fi, err := os.Stat(f.Path(p))
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s keeps its mode", p)
				keptPod, err := os.ReadFile(filepath.Join(kept, p))
				require.NoError(t, err)
				assert.Equal(t, before[p], string(keptPod), "%s kept as it was, for a rollback", p)
			}
			etcd, err := os.ReadFile(f.Path(ManifestsDir + "/etcd.yaml"))
			require.NoError(t, err)
			assert.Equal(t, etcdPod, string(etcd), "etcd is kubeadm's to upgrade, after its snapshot")
			assert.True(t, open, "the kubelet unpacks the new images inside the window")

			// A kubelet restart finds the tags moved.
			again, err := PrestartControlPlane(context.Background(), f.Host)
			require.NoError(t, err)
			assert.Empty(t, again)

			// The phase still runs kubeadm, and keeps the first copy.
			*cmds = nil
			require.NoError(t, applyKubernetesUpgrade(context.Background(), f, clusterNode(machineconfig.RoleInit)))
			assert.Contains(t, *cmds, "kubeadm upgrade apply --config="+UpgradeConfigFile+" --yes")
			keptPod, err := os.ReadFile(filepath.Join(kept, ManifestsDir, "kube-apiserver.yaml"))
			require.NoError(t, err)
			assert.Equal(t, before[ManifestsDir+"/kube-apiserver.yaml"], string(keptPod), "a rollback restores the release kubeadm configured")
			assert.Equal(t, "v1.36.4", recorded(f))
		})
	}
}

// A manifest that names its image other than once is not guessed at: the
// error names it, and kubeadm's upgrade moves it.
func TestPrestartControlPlaneRefusesAnOddManifest(t *testing.T) {
	for name, scheduler := range map[string]string{
		"twice":           staticPod("kube-scheduler", "v1.36.3") + "  - image: registry.k8s.io/kube-scheduler:v1.36.3\n",
		"a longer tag":    staticPod("kube-scheduler", "v1.36.30"),
		"another release": staticPod("kube-scheduler", "v1.36.2"),
	} {
		t.Run(name, func(t *testing.T) {
			f, _ := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.3")
			for _, pod := range controlPlanePods {
				require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/"+pod+".yaml"), []byte(staticPod(pod, "v1.36.3")), 0o600))
			}
			require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/kube-scheduler.yaml"), []byte(scheduler), 0o600))

			_, err := PrestartControlPlane(context.Background(), f.Host)
			require.Error(t, err)
			assert.Contains(t, err.Error(), ManifestsDir+"/kube-scheduler.yaml names the image registry.k8s.io/kube-scheduler:v1.36.3")
			got, err := os.ReadFile(f.Path(ManifestsDir + "/kube-scheduler.yaml"))
			require.NoError(t, err)
			assert.Equal(t, scheduler, string(got), "left as it is")
		})
	}
}
