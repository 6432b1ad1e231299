package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
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

			did, err := PrestartControlPlane(context.Background(), f.Host, "")
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
			assert.Equal(t, []string{"sync", "kubeadm certs renew all --config=" + CertsRenewConfigFile}, *cmds,
				"the certificates kubeadm renews when it restarts a component, renewed before any starts")
			renew, err := os.ReadFile(f.Path(CertsRenewConfigFile))
			require.NoError(t, err)
			assert.Contains(t, string(renew), `kubernetesVersion: "v1.36.4"`)
			assert.Contains(t, string(renew), "encryptionAlgorithm: ECDSA-P256")
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
			*cmds = nil
			again, err := PrestartControlPlane(context.Background(), f.Host, "")
			require.NoError(t, err)
			assert.Empty(t, again)
			assert.Empty(t, *cmds)

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

// A manifest that names its image other than once is not guessed at, and
// a renewal that fails stops it too: the error names what, no manifest is
// written, and kubeadm's upgrade moves them (and renews) as before.
func TestPrestartControlPlaneRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		scheduler string
		renewFail bool
		want      string
	}{
		"an image named twice": {scheduler: staticPod("kube-scheduler", "v1.36.3") + "  - image: registry.k8s.io/kube-scheduler:v1.36.3\n",
			want: ManifestsDir + "/kube-scheduler.yaml names the image registry.k8s.io/kube-scheduler:v1.36.3 2 times"},
		"a longer tag": {scheduler: staticPod("kube-scheduler", "v1.36.30"),
			want: ManifestsDir + "/kube-scheduler.yaml names the image registry.k8s.io/kube-scheduler:v1.36.3 0 times"},
		"another release": {scheduler: staticPod("kube-scheduler", "v1.36.2"),
			want: ManifestsDir + "/kube-scheduler.yaml names the image registry.k8s.io/kube-scheduler:v1.36.3 0 times"},
		"the image in a flag, not on an image line": {scheduler: strings.Replace(staticPod("kube-scheduler", "v1.36.3"), "    image: ", "    - --pod-infra-image=", 1),
			want: ManifestsDir + "/kube-scheduler.yaml names the image registry.k8s.io/kube-scheduler:v1.36.3 0 times"},
		"the renewal fails": {scheduler: staticPod("kube-scheduler", "v1.36.3"), renewFail: true,
			want: "renew the control plane's certificates: kubeadm certs renew all"},
	} {
		t.Run(name, func(t *testing.T) {
			f, cmds := upgradeFlow(t, "v1.36.4", "v1.36.3", "v1.36.3")
			if tc.renewFail {
				exec := f.Host.Executor
				f.Host.Executor = host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
					if _, err := exec.Exec(ctx, name, args...); err != nil || name != "kubeadm" {
						return nil, err
					}
					return []byte("error: the CA key is missing"), errors.New("exit status 1")
				})
			}
			before := map[string]string{}
			for _, pod := range controlPlanePods {
				before[pod] = staticPod(pod, "v1.36.3")
			}
			before["kube-scheduler"] = tc.scheduler
			for pod, b := range before {
				require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/"+pod+".yaml"), []byte(b), 0o600))
			}

			_, err := PrestartControlPlane(context.Background(), f.Host, "")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			for pod, b := range before {
				got, err := os.ReadFile(f.Path(ManifestsDir + "/" + pod + ".yaml"))
				require.NoError(t, err)
				assert.Equal(t, b, string(got), "%s left as it is", pod)
			}
			if !tc.renewFail {
				assert.NotContains(t, strings.Join(*cmds, "\n"), "kubeadm", "nothing renewed before every manifest was checked")
			}
		})
	}
}

// TestPrestartControlPlaneInPlace: a node that runs a staged slot's
// Kubernetes in place moves its control plane to that slot's release,
// which the booted slot's bundle does not name.
func TestPrestartControlPlaneInPlace(t *testing.T) {
	f, cmds := upgradeFlow(t, "v1.36.3", "v1.36.3", "v1.36.3")
	for _, pod := range controlPlanePods {
		require.NoError(t, os.WriteFile(f.Path(ManifestsDir+"/"+pod+".yaml"), []byte(staticPod(pod, "v1.36.3")), 0o600))
	}
	staged := f.Path(filepath.Join(layout.InPlaceSlotDir, bundleIndex))
	require.NoError(t, os.MkdirAll(filepath.Dir(staged), 0o755))
	require.NoError(t, os.WriteFile(staged, []byte(`{"manifests":[{"annotations":{"io.containerd.image.name":"registry.k8s.io/kube-apiserver:v1.36.4"}}]}`), 0o644))

	did, err := PrestartControlPlane(context.Background(), f.Host, "")
	require.NoError(t, err)
	assert.Empty(t, did, "the booted slot carries the node's own Kubernetes")
	did, err = PrestartControlPlane(context.Background(), f.Host, layout.InPlaceSlotDir)
	require.NoError(t, err)
	assert.Contains(t, did, "start on Kubernetes v1.36.4")
	assert.Contains(t, *cmds, "kubeadm certs renew all --config="+CertsRenewConfigFile)
	for _, pod := range controlPlanePods {
		got, err := os.ReadFile(f.Path(ManifestsDir + "/" + pod + ".yaml"))
		require.NoError(t, err)
		assert.Equal(t, staticPod(pod, "v1.36.4"), string(got))
	}
}
