package kubeadmflow

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/apilb"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
)

// Where the cluster phases write.
const (
	KubeadmConfigFile = "/etc/terrarium/kubeadm.yaml"
	ClusterCAFile     = "/etc/terrarium/pki/cluster-ca.pem"
	PodResolvConf     = "/etc/terrarium/pod-resolv.conf"
	CNIConflist       = "/etc/cni/net.d/10-flannel.conflist"
	KubernetesPKIDir  = layout.KubernetesPKIDir
	AdminKubeconfig   = "/etc/kubernetes/admin.conf"
	KubeletKubeconfig = "/etc/kubernetes/kubelet.conf"
	// The kubelet's token credential for its TLS bootstrap, and the
	// client certificate the bootstrap ends with.
	BootstrapKubeconfig = "/etc/kubernetes/bootstrap-kubelet.conf"
	KubeletClientCert   = layout.KubeletClientCert
	// The steps after which the bootstrap token is no longer needed: a
	// joiner's wait for the API, the init node's creation of the token.
	stepWaitForAPI     = "wait for the API"
	stepBootstrapToken = "init phases control-plane … bootstrap-token"
	// stepAddons is the init node's last kubeadm step: kubelet-finalize
	// and the add-ons.
	stepAddons = "init phases kubelet-finalize, addon"
	// stepRuntime waits for containerd's CRI before kubeadm's preflight.
	stepRuntime = "container runtime"
	// stepImages pulls the images the node will run (pullImages).
	stepImages = "pull images"
	// stepLocalStorage applies the default StorageClass.
	stepLocalStorage = "local storage (local-path)"
	bundleIndex      = layout.BundleDir + "/index.json"
	// FlannelSubnetEnv is where flanneld writes the node's pod-subnet
	// lease, which our flannel CNI plugin reads.
	FlannelSubnetEnv = "/run/flannel/subnet.env"
)

// Timeouts of the cluster phases (emulated machines are slow).
const (
	apiWaitTimeout = 30 * time.Minute
	// localAPIWaitTimeout bounds one wait for this node's API server;
	// the step is retried (with diagnostics on the console) after it.
	localAPIWaitTimeout = 8 * time.Minute
	readyWaitTimeout    = 15 * time.Minute
	// podNetworkWaitTimeout bounds the wait, after the node is Ready, for
	// its flannel and kube-proxy to run: their images unpack on the node,
	// measured at 12 min and more on a starved emulated worker.
	podNetworkWaitTimeout = 30 * time.Minute
	// runtimeWaitTimeout bounds the wait for containerd's CRI;
	// runtimeCallTimeout one question to it (kubeadm's: 2 s).
	runtimeWaitTimeout = 10 * time.Minute
	runtimeCallTimeout = time.Minute
	// diagnosticsEvery is how often a long wait for the node's
	// readiness shows the kubelet's log and the containers.
	diagnosticsEvery = 2 * time.Minute
)

// PhaseKubernetes is the phase of the kubeadm steps: the first to reach
// the API.
const PhaseKubernetes = "kubernetes"

// PhaseKubernetesReady is the phase right after PhaseKubernetes that
// waits for the node to be Ready with its pod network up, so that the
// later phases (the files' modes, the Kubernetes upgrade, the add-ons)
// normally run on a Ready node. Its Apply waits; its Verify looks once.
const PhaseKubernetesReady = "kubernetes-ready"

// Phases are a cluster node's phases, in order, after the node's own.
func (f *Flow) Phases() []phase.Phase {
	on := func(fn func(ctx context.Context, h *Flow, c *machineconfig.Config) error) phase.Func {
		return func(ctx context.Context, c *machineconfig.Config) error { return fn(ctx, f, c) }
	}
	return []phase.Phase{
		{Name: "kubernetes-host", Apply: on(applyKubernetesHost), Verify: on(verifyKubernetesHost)},
		{Name: "kubernetes-pki", Apply: on(applyKubernetesPKI), Verify: on(verifyKubernetesPKI)},
		{Name: "kubernetes-config", Apply: on(applyKubeadmConfig), Verify: on(verifyKubeadmConfig)},
		// The volume area before the kubelet starts a pod that uses it.
		{Name: PhaseLocalVolumes, Apply: on(applyLocalVolumes), Verify: on(verifyLocalVolumes)},
		{Name: PhaseKubernetes, Apply: on(applyKubernetes), Verify: on(verifyKubernetes)},
		{Name: PhaseKubernetesReady, Apply: on(applyKubernetesReady), Verify: on(verifyKubernetesReady), Waits: true},
		f.filesPhase(),
		f.upgradePhase(),
		f.addonsPhase(),
	}
}

// hostFiles are the node-level files every cluster node needs.
func hostFiles(c *machineconfig.Config) (map[string]string, error) {
	cl := c.Cluster
	lb, err := apilb.MarshalFile(apilb.File{
		Listen: cl.APIEndpoint(), Backends: cl.APIBackends(),
	})
	if err != nil {
		return nil, err
	}
	return map[string]string{
		apilb.ConfigFile: string(lb),
		ClusterCAFile:    cl.CACert,
		// Pods with dnsPolicy Default (CoreDNS) get this resolver: a
		// loopback address inside the pod, where nothing answers, so
		// names outside the cluster fail at once and no query leaves
		// the node.
		PodResolvConf: "# Terrarium: no upstream DNS (air-gapped)\nnameserver 127.0.0.53\n",
		CNIConflist:   addons.FlannelConflist,
	}, nil
}

func applyKubernetesHost(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	// The kernel's modules and switches without a program each where it
	// can: on a worker starved beside the init node every process
	// started costs seconds (this step takes ten times as long there as
	// on the init node: docs/benchmarks.md). The modules: the overlay
	// snapshotter's, kube-proxy's bridge netfilter, flannel's VXLAN.
	for _, m := range []string{"overlay", "br_netfilter", "vxlan"} {
		if _, err := os.Stat(h.Path("/sys/module/" + m)); err == nil {
			continue
		}
		if err := h.Run(ctx, "modprobe", m); err != nil {
			return err
		}
	}
	// Routing, and bridged traffic through nftables.
	for _, k := range []string{
		"/proc/sys/net/ipv4/ip_forward",
		"/proc/sys/net/bridge/bridge-nf-call-iptables",
		"/proc/sys/net/bridge/bridge-nf-call-ip6tables",
	} {
		if err := os.WriteFile(h.Path(k), []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("switch on %s: %w", k, err)
		}
	}
	files, err := hostFiles(c)
	if err != nil {
		return err
	}
	lbChanged := false
	for _, p := range sortedKeys(files) {
		if p == ClusterCAFile || p == CNIConflist {
			// PKI, and CNI's configuration (read by containerd, the CIS
			// benchmark's 1.1.9), root's alone; the others are read by
			// the balancer's dynamic user and the pods.
			if err := writeWithMode(h, p, []byte(files[p]), ownerOnly); err != nil {
				return err
			}
			continue
		}
		w, err := h.WriteIfChanged(p, []byte(files[p]), 0o644)
		if err != nil {
			return err
		}
		lbChanged = lbChanged || (w && p == apilb.ConfigFile)
	}
	// The image enables the balancer (it starts at boot once its config
	// exists): no `systemctl enable`, which reloads systemd.
	if lbChanged {
		return h.Run(ctx, "systemctl", "restart", apilb.Unit)
	}
	return h.Run(ctx, "systemctl", "start", apilb.Unit)
}

func verifyKubernetesHost(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	files, err := hostFiles(c)
	if err != nil {
		return err
	}
	if err := h.FilesMatch(files); err != nil {
		return err
	}
	if err := h.Run(ctx, "systemctl", "is-active", "--quiet", apilb.Unit); err != nil {
		return fmt.Errorf("the local API balancer is not running: %w", err)
	}
	return nil
}

// pkiFiles are the CA files kubeadm finds pre-seeded on control planes,
// with their modes: every one readable by its owner only, the
// certificates too (the CIS benchmark's 1.1.20), the owner root but for
// etcd's CA certificate, which etcd reads (kubeadmFiles).
func pkiFiles(c *machineconfig.Cluster) map[string]os.FileMode {
	return map[string]os.FileMode{
		"ca.crt": 0o600, "ca.key": 0o600,
		"front-proxy-ca.crt": 0o600, "front-proxy-ca.key": 0o600,
		"etcd/ca.crt": 0o600, "etcd/ca.key": 0o600,
		"sa.pub": 0o600, "sa.key": 0o600,
	}
}

func pkiContent(c *machineconfig.Cluster) map[string]string {
	p := c.PKI
	return map[string]string{
		"ca.crt": c.CACert, "ca.key": p.CAKey,
		"front-proxy-ca.crt": p.FrontProxyCA.Cert, "front-proxy-ca.key": p.FrontProxyCA.Key,
		"etcd/ca.crt": p.EtcdCA.Cert, "etcd/ca.key": p.EtcdCA.Key,
		"sa.pub": p.ServiceAccount.Cert, "sa.key": p.ServiceAccount.Key,
	}
}

// applyKubernetesPKI writes the CAs, then gives the PKI's files and
// directories their modes and owners (tightenKubeadmFiles): etcd's
// account is made first, for its CA certificate and directory.
func applyKubernetesPKI(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.IsControlPlane() {
		return nil
	}
	if _, err := ensureEtcdUser(ctx, h); err != nil {
		return err
	}
	content := pkiContent(c.Cluster)
	for name, mode := range pkiFiles(c.Cluster) {
		if err := writeWithMode(h, filepath.Join(KubernetesPKIDir, name), []byte(content[name]), mode); err != nil {
			return err
		}
	}
	return tightenKubeadmFiles(h)
}

func verifyKubernetesPKI(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.IsControlPlane() {
		return nil
	}
	content := pkiContent(c.Cluster)
	for name, mode := range pkiFiles(c.Cluster) {
		p := h.Path(filepath.Join(KubernetesPKIDir, name))
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if string(b) != content[name] {
			return fmt.Errorf("%s/%s differs from the machine config", KubernetesPKIDir, name)
		}
		if err := checkMode(h, filepath.Join(KubernetesPKIDir, name), mode); err != nil {
			return err
		}
	}
	if fi, err := os.Stat(h.Path(KubernetesPKIDir)); err != nil || fi.Mode().Perm() != ownerOnlyDir {
		return fmt.Errorf("%s must be readable by root only", KubernetesPKIDir)
	}
	// Every file of the PKI and of etcd's copies, and their
	// directories: their modes and owners.
	inPKI := func(p string) bool {
		for _, dir := range []string{KubernetesPKIDir, layout.EtcdOwnPKIDir} {
			if p == dir || strings.HasPrefix(p, dir+"/") {
				return true
			}
		}
		return false
	}
	return eachKubeadmFile(h, func(p string, want meta) error {
		if !inPKI(p) {
			return nil
		}
		return checkMeta(h, p, want)
	})
}

// bundleImages are the names of the images in the slot's bundle, in its
// order.
func bundleImages(h *host.Host, root string) ([]string, error) {
	b, err := os.ReadFile(h.Path(filepath.Join(root, bundleIndex)))
	if err != nil {
		return nil, fmt.Errorf("read the slot's bundle: %w", err)
	}
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", bundleIndex, err)
	}
	var names []string
	for _, m := range idx.Manifests {
		for _, k := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
			if v := m.Annotations[k]; v != "" {
				names = append(names, v)
				break
			}
		}
	}
	return names, nil
}

// KubernetesVersion is the Kubernetes version of the slot's bundle.
func (f *Flow) KubernetesVersion() (string, error) {
	return bundleKubernetesVersion(f.Host, f.KubernetesRoot())
}

// APIServerImage is kube-apiserver's image, whose tag in a slot's bundle
// is the slot's Kubernetes version.
const APIServerImage = "registry.k8s.io/kube-apiserver"

// bundleKubernetesVersion is the Kubernetes version of the slot's bundle:
// the tag of its kube-apiserver image.
func bundleKubernetesVersion(h *host.Host, root string) (string, error) {
	names, err := bundleImages(h, root)
	if err != nil {
		return "", err
	}
	const prefix = APIServerImage + ":"
	for _, n := range names {
		if v, ok := strings.CutPrefix(n, prefix); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("the slot's bundle (%s) carries no %s image: this image cannot run Kubernetes", bundleIndex, strings.TrimSuffix(prefix, ":"))
}

func kubeadmConfig(h *Flow, c *machineconfig.Config) ([]byte, error) {
	v, err := bundleKubernetesVersion(h.Host, h.KubernetesRoot())
	if err != nil {
		return nil, err
	}
	return kubeadmconfig.Render(kubeadmconfig.Input{
		Cluster: c.Cluster, NodeName: c.Hostname, KubernetesVersion: v, PodResolvConf: PodResolvConf, Now: h.Now(),
	})
}

// withoutTTL drops the render-time line, for comparing configurations.
func withoutTTL(b []byte) string {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, kubeadmconfig.TTLLine) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func applyKubeadmConfig(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	b, err := kubeadmConfig(h, c)
	if err != nil {
		return err
	}
	// Rewritten every time: the token's TTL counts from now.
	if _, err := h.WriteIfChanged(KubeadmConfigFile, b, 0o600); err != nil {
		return err
	}
	if c.Cluster.IsControlPlane() {
		etcd, err := ensureEtcdUser(ctx, h)
		if err != nil {
			return err
		}
		for name, p := range kubeadmconfig.Patches(etcd) {
			if err := writeWithMode(h, filepath.Join(kubeadmconfig.PatchesDir, name), p, ownerOnly); err != nil {
				return err
			}
		}
		if err := applyControlPlaneFiles(h, c.Cluster); err != nil {
			return err
		}
	}
	return nil
}

func verifyKubeadmConfig(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	want, err := kubeadmConfig(h, c)
	if err != nil {
		return err
	}
	got, err := os.ReadFile(h.Path(KubeadmConfigFile))
	if err != nil {
		return err
	}
	if withoutTTL(got) != withoutTTL(want) {
		return fmt.Errorf("%s differs from the machine config", KubeadmConfigFile)
	}
	if c.Cluster.IsControlPlane() {
		etcd, err := etcdUser(h)
		if err != nil {
			return err
		}
		for name, p := range kubeadmconfig.Patches(etcd) {
			f := filepath.Join(kubeadmconfig.PatchesDir, name)
			if got, err := os.ReadFile(h.Path(f)); err != nil || string(got) != string(p) {
				return fmt.Errorf("kubeadm patch %s is missing or differs from this image's", f)
			}
			if err := checkMode(h, f, ownerOnly); err != nil {
				return err
			}
		}
		if err := verifyControlPlaneFiles(h, c.Cluster); err != nil {
			return err
		}
	}
	return nil
}

// flannelImage is the flannel image the bundle carries.
func flannelImage(h *Flow) string {
	return bundleImage(h, "docker.io/flannel/flannel", addons.DefaultFlannelImage)
}

// localPathImage is the local-path-provisioner image the bundle carries.
func localPathImage(h *Flow) string {
	return bundleImage(h, "docker.io/rancher/local-path-provisioner", addons.DefaultLocalPathImage)
}

// networkPolicyImage is the kube-network-policies image the bundle carries.
func networkPolicyImage(h *Flow) string {
	return bundleImage(h, "registry.k8s.io/networking/kube-network-policies", addons.DefaultNetworkPolicyImage)
}

// bundleImage is the bundle's image of repository repo, or def when the
// bundle has none.
func bundleImage(h *Flow, repo, def string) string {
	b, _ := os.ReadFile(h.Path(filepath.Join(h.KubernetesRoot(), bundleIndex)))
	prefix := `"` + repo + `:`
	if i := strings.Index(string(b), prefix); i >= 0 {
		rest := string(b)[i+1:]
		if j := strings.Index(rest, `"`); j > 0 {
			return rest[:j]
		}
	}
	return def
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
