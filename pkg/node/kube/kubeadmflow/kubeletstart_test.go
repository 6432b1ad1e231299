package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// kubeletAPI is oneNode with the cluster's kubelet-config ConfigMap
// (kubelet: its "kubelet" key; none when empty).
type kubeletAPI struct {
	oneNode
	kubelet string
}

func (k *kubeletAPI) ConfigMap(_ context.Context, ns, name string) (kubeclient.ConfigMap, error) {
	if k.kubelet == "" || ns != "kube-system" || name != kubeletConfigMap {
		return kubeclient.ConfigMap{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
	}
	return kubeclient.ConfigMap{Namespace: ns, Name: name, Data: map[string]string{"kubelet": k.kubelet}}, nil
}

const clusterKubelet = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
containerRuntimeEndpoint: unix:///somewhere/else.sock
resolvConf: /etc/terrarium/pod-resolv.conf
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
`

func TestKubeletStart(t *testing.T) {
	cfg := &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{
		Name: "lab", Role: machineconfig.RoleWorker, NodeIP: "10.77.0.20", Token: "abcdef.0123456789abcdef", CACert: "-----BEGIN CERTIFICATE-----\nCA\n",
	}}
	tests := []struct {
		name    string
		api     *kubeletAPI
		wantErr string
	}{
		{"a new node", &kubeletAPI{oneNode: oneNode{name: "w-2"}, kubelet: clusterKubelet}, ""},
		{"a not-Ready Node of its name", &kubeletAPI{oneNode: oneNode{name: "w-1"}, kubelet: clusterKubelet}, ""},
		{"a Ready Node of its name", &kubeletAPI{oneNode: oneNode{name: "w-1", readyPolls: 1}, kubelet: clusterKubelet},
			"a Node named w-1 is Ready in the cluster: another machine runs under this name"},
		{"the API does not answer", &kubeletAPI{oneNode: oneNode{err: errors.New("connection refused")}, kubelet: clusterKubelet},
			"ask the cluster for a Node named w-1: connection refused"},
		{"no kubelet configuration in the cluster", &kubeletAPI{oneNode: oneNode{name: "w-2"}},
			"read the cluster's kubelet configuration"},
		{"not a kubelet configuration", &kubeletAPI{oneNode: oneNode{name: "w-2"}, kubelet: "kind: KubeProxyConfiguration\n"},
			"configmap kube-system/kubelet-config: key kubelet: kind KubeProxyConfiguration, want KubeletConfiguration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFlow(t, nil)
			var cmds []string
			f.Executor = host.ExecFunc(func(_ context.Context, name string, args ...string) ([]byte, error) {
				cmds = append(cmds, name+" "+strings.Join(args, " "))
				return nil, nil
			})
			f.API = func(kubeconfig string) (APIClient, error) {
				assert.Equal(t, JoinKubeconfig, kubeconfig, "asked with the bootstrap token")
				return tt.api, nil
			}
			err := kubeletStart(context.Background(), f, cfg)
			assert.NoFileExists(t, f.Path(JoinKubeconfig), "the join kubeconfig is removed after the step")
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				assert.Empty(t, cmds, "the kubelet is not started")
				assert.NoFileExists(t, f.Path(BootstrapKubeconfig), "no token credential is left")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{"systemctl restart kubelet.service"}, cmds)
			read := func(p string) string {
				b, err := os.ReadFile(f.Path(p))
				require.NoError(t, err)
				return string(b)
			}
			assert.Equal(t, `apiVersion: kubelet.config.k8s.io/v1beta1
cgroupDriver: systemd
clusterDNS:
    - 10.96.0.10
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
kind: KubeletConfiguration
resolvConf: /etc/terrarium/pod-resolv.conf
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
`, read(KubeletConfigFile), "the cluster's configuration, with the node's CRI endpoint")
			assert.Equal(t, "containerRuntimeEndpoint: \"unix:///run/containerd/containerd.sock\"\n", read(kubeletInstanceFile))
			assert.Equal(t, "KUBELET_KUBEADM_ARGS=\"--node-ip=10.77.0.20\"\n", read(KubeletFlagsFile))
			assert.Equal(t, cfg.Cluster.CACert, read(KubernetesPKIDir+"/ca.crt"))
			assert.DirExists(t, f.Path(ManifestsDir), "the static pod path the configuration names")
			boot := read(BootstrapKubeconfig)
			assert.Contains(t, boot, "token: abcdef.0123456789abcdef")
			assert.Contains(t, boot, "server: https://"+cfg.Cluster.APIEndpoint())
			fi, err := os.Stat(f.Path(BootstrapKubeconfig))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the token credential is root's alone")
		})
	}
}
