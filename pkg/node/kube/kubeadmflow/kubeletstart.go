package kubeadmflow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

const (
	// stepKubeletStart starts a worker's kubelet for its TLS bootstrap
	// (kubeletStart), in the place of `kubeadm join phase kubelet-start`.
	stepKubeletStart = "kubelet start"
	// kubeletConfigMap is kubeadm's ConfigMap (kube-system) of the
	// cluster's kubelet configuration, under key "kubelet"; kubeadm lets
	// the bootstrap token's group read it.
	kubeletConfigMap = "kubelet-config"
)

// kubeletStart does on a worker what `kubeadm join phase kubelet-start`
// (v1.36) does once discovery is done, in process: a kubeadm process
// spent 13 s of a worker's CPU under emulation (49 s on a loaded host),
// on the way to every Node Ready. Discovery is done: the worker pins the
// cluster CA from its config, and waitForAPI waited until its token
// reads its Node. What it writes is kubeadm's:
//
//   - /var/lib/kubelet/config.yaml: the cluster's kubelet configuration
//     (ConfigMap kube-system/kubelet-config, which kubeadm init uploaded
//     with kubeadm's defaults applied), with the node's own CRI endpoint
//     (the node-local CRI socket, GA in kubeadm 1.36);
//   - /var/lib/kubelet/instance-config.yaml: that CRI endpoint alone;
//   - /var/lib/kubelet/kubeadm-flags.env: the node's IP, the only flag
//     kubeadm writes for a worker named by its hostname;
//   - /etc/kubernetes/bootstrap-kubelet.conf: the bootstrap token's
//     kubeconfig at the node's balanced API endpoint, as cluster-info
//     names it (waitForKubeletBootstrap removes it);
//   - /etc/kubernetes/pki/ca.crt, the cluster CA, when it is missing;
//   - /etc/kubernetes/manifests, the static pod path, empty.
//
// Like kubeadm, it refuses a name whose Node is Ready (waitForStaleNode,
// the step before, has waited out a restored cluster's record). Then it
// restarts the kubelet, which does its TLS bootstrap; kubeadm upgrade node
// later reads and rewrites these files as its own.
func kubeletStart(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	return withJoinClient(h, c.Cluster, func(api APIClient) error { return startKubelet(ctx, h, c, api) })
}

// startKubelet is kubeletStart's work, asking api as the bootstrap token.
func startKubelet(ctx context.Context, h *Flow, c *machineconfig.Config, api APIClient) error {
	cl := c.Cluster
	// kubeadm's own check: no Node of this name may be Ready.
	switch n, err := api.Node(ctx, c.Hostname); {
	case err == nil && n.Ready:
		return fmt.Errorf("a Node named %s is Ready in the cluster: another machine runs under this name; give this node another hostname, or, if that machine is gone for good, delete its Node (kubectl delete node %s)", c.Hostname, c.Hostname)
	case err != nil && !errors.Is(err, kubeclient.ErrNotFound):
		return fmt.Errorf("ask the cluster for a Node named %s: %w", c.Hostname, err)
	}
	cm, err := api.ConfigMap(ctx, "kube-system", kubeletConfigMap)
	if err != nil {
		return fmt.Errorf("read the cluster's kubelet configuration: %w", err)
	}
	config, err := nodeKubeletConfig(cm.Data["kubelet"])
	if err != nil {
		return fmt.Errorf("configmap kube-system/%s: %w", kubeletConfigMap, err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		// Root's alone, unlike kubeadm's 0644 (docs/security.md).
		{KubeletConfigFile, config, ownerOnly},
		{kubeletInstanceFile, []byte("containerRuntimeEndpoint: " + strconv.Quote(kubeadmconfig.CRISocket) + "\n"), ownerOnly},
		{KubeletFlagsFile, kubeletFlags(cl), ownerOnly},
		{BootstrapKubeconfig, joinKubeconfig(cl), ownerOnly},
	} {
		if _, err := h.WriteIfChanged(f.path, f.data, f.mode); err != nil {
			return err
		}
	}
	// The kubelet's static pod path, empty on a worker: without it the
	// kubelet logs an error every second or so ("Unable to read config
	// path"), journald's work on a starved node.
	if err := os.MkdirAll(h.Path(ManifestsDir), 0o700); err != nil {
		return fmt.Errorf("the kubelet's static pod path: %w", err)
	}
	ca := filepath.Join(KubernetesPKIDir, "ca.crt")
	if _, err := os.Stat(h.Path(ca)); errors.Is(err, os.ErrNotExist) {
		if _, err := h.WriteIfChanged(ca, []byte(cl.CACert), ownerOnly); err != nil {
			return err
		}
	}
	return h.Run(ctx, "systemctl", "restart", "kubelet.service")
}

// nodeKubeletConfig is the cluster's kubelet configuration (the
// kubelet-config ConfigMap's "kubelet") with this node's CRI endpoint, as
// kubeadm merges instance-config.yaml into it.
func nodeKubeletConfig(cluster string) ([]byte, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(cluster), &m); err != nil {
		return nil, fmt.Errorf("key kubelet: %w", err)
	}
	if m["kind"] != "KubeletConfiguration" {
		return nil, fmt.Errorf("key kubelet: kind %v, want KubeletConfiguration (is the init node past %q?)", m["kind"], stepBootstrapToken)
	}
	m["containerRuntimeEndpoint"] = kubeadmconfig.CRISocket
	return yaml.Marshal(m)
}

// kubeletFlags is kubeadm-flags.env for a worker named by its hostname:
// its node IP, kubeadmconfig's kubeletExtraArgs.
func kubeletFlags(cl *machineconfig.Cluster) []byte {
	return []byte("KUBELET_KUBEADM_ARGS=" + strconv.Quote("--node-ip="+cl.NodeIP) + "\n")
}
