package firstboot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/addons"
	"github.com/terrarium-os/terrarium/pkg/apilb"
	"github.com/terrarium-os/terrarium/pkg/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/layout"
	"github.com/terrarium-os/terrarium/pkg/machineconfig"
)

// Where the cluster phases write.
const (
	KubeadmConfigFile = "/etc/terrarium/kubeadm.yaml"
	ClusterCAFile     = "/etc/terrarium/pki/cluster-ca.pem"
	PodResolvConf     = "/etc/terrarium/pod-resolv.conf"
	FlannelManifest   = "/etc/terrarium/addons/flannel.yaml"
	CoreDNSManifest   = "/etc/terrarium/addons/coredns-config.yaml"
	CNIConflist       = "/etc/cni/net.d/10-flannel.conflist"
	KubernetesPKIDir  = "/etc/kubernetes/pki"
	AdminKubeconfig   = "/etc/kubernetes/admin.conf"
	KubeletKubeconfig = "/etc/kubernetes/kubelet.conf"
	// The kubelet's token credential for its TLS bootstrap, and the
	// client certificate the bootstrap ends with.
	BootstrapKubeconfig = "/etc/kubernetes/bootstrap-kubelet.conf"
	KubeletClientCert   = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	kubeadmProgressRel  = "kubeadm.json"
	// The steps after which the bootstrap token is no longer needed: a
	// joiner's wait for the API, the init node's creation of the token.
	stepWaitForAPI     = "wait for the API"
	stepBootstrapToken = "init phase bootstrap-token"
	bundleIndex        = "/usr/lib/terrarium/bundle/index.json"
)

// Timeouts of the cluster phases (emulated machines are slow).
const (
	apiWaitTimeout = 30 * time.Minute
	// localAPIWaitTimeout bounds one wait for this node's API server;
	// the step is retried (with diagnostics on the console) after it.
	localAPIWaitTimeout = 8 * time.Minute
	readyWaitTimeout    = 15 * time.Minute
	stepAttempts        = 3
	stepRetryDelay      = 15 * time.Second
)

func clusterPhases() []phase {
	return []phase{
		{Name: "kubernetes-host", Apply: applyKubernetesHost, Verify: verifyKubernetesHost},
		{Name: "kubernetes-pki", Apply: applyKubernetesPKI, Verify: verifyKubernetesPKI},
		{Name: "kubernetes-config", Apply: applyKubeadmConfig, Verify: verifyKubeadmConfig},
		{Name: "kubernetes", Apply: applyKubernetes, Verify: verifyKubernetes},
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

func applyKubernetesHost(ctx context.Context, h *Host, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	for _, m := range []string{"overlay", "br_netfilter", "vxlan"} {
		if err := h.run(ctx, "modprobe", m); err != nil {
			return err
		}
	}
	if err := h.run(ctx, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
		"net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"); err != nil {
		return err
	}
	files, err := hostFiles(c)
	if err != nil {
		return err
	}
	lbChanged := false
	for _, p := range sortedKeys(files) {
		w, err := h.writeIfChanged(p, []byte(files[p]), 0o644)
		if err != nil {
			return err
		}
		lbChanged = lbChanged || (w && p == apilb.ConfigFile)
	}
	if lbChanged {
		if err := h.run(ctx, "systemctl", "enable", apilb.Unit); err != nil {
			return err
		}
		return h.run(ctx, "systemctl", "restart", apilb.Unit)
	}
	return h.run(ctx, "systemctl", "start", apilb.Unit)
}

func verifyKubernetesHost(ctx context.Context, h *Host, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	files, err := hostFiles(c)
	if err != nil {
		return err
	}
	for p, content := range files {
		b, err := os.ReadFile(h.Path(p))
		if err != nil {
			return err
		}
		if string(b) != content {
			return fmt.Errorf("%s differs from the machine config", p)
		}
	}
	if err := h.run(ctx, "systemctl", "is-active", "--quiet", apilb.Unit); err != nil {
		return fmt.Errorf("the local API balancer is not running: %w", err)
	}
	return nil
}

// pkiFiles are the CA files kubeadm finds pre-seeded on control planes,
// with their modes: keys are readable by root only.
func pkiFiles(c *machineconfig.Cluster) map[string]os.FileMode {
	return map[string]os.FileMode{
		"ca.crt": 0o644, "ca.key": 0o600,
		"front-proxy-ca.crt": 0o644, "front-proxy-ca.key": 0o600,
		"etcd/ca.crt": 0o644, "etcd/ca.key": 0o600,
		"sa.pub": 0o644, "sa.key": 0o600,
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

func applyKubernetesPKI(ctx context.Context, h *Host, c *machineconfig.Config) error {
	if c.Cluster == nil || !c.Cluster.IsControlPlane() {
		return nil
	}
	content := pkiContent(c.Cluster)
	for name, mode := range pkiFiles(c.Cluster) {
		if _, err := h.writeIfChanged(filepath.Join(KubernetesPKIDir, name), []byte(content[name]), mode); err != nil {
			return err
		}
	}
	for _, d := range []string{KubernetesPKIDir, KubernetesPKIDir + "/etcd"} {
		if err := os.Chmod(h.Path(d), 0o700); err != nil {
			return err
		}
	}
	return nil
}

func verifyKubernetesPKI(ctx context.Context, h *Host, c *machineconfig.Config) error {
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
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
			return fmt.Errorf("%s/%s has mode %v, want %v", KubernetesPKIDir, name, fi.Mode().Perm(), mode)
		}
	}
	if fi, err := os.Stat(h.Path(KubernetesPKIDir)); err != nil || fi.Mode().Perm() != 0o700 {
		return fmt.Errorf("%s must be readable by root only", KubernetesPKIDir)
	}
	return nil
}

// bundleKubernetesVersion is the Kubernetes version of the slot's bundle:
// the tag of its kube-apiserver image.
func bundleKubernetesVersion(h *Host) (string, error) {
	b, err := os.ReadFile(h.Path(bundleIndex))
	if err != nil {
		return "", fmt.Errorf("read the slot's bundle: %w", err)
	}
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return "", fmt.Errorf("%s: %w", bundleIndex, err)
	}
	const prefix = "registry.k8s.io/kube-apiserver:"
	for _, m := range idx.Manifests {
		for _, k := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
			if v, ok := strings.CutPrefix(m.Annotations[k], prefix); ok {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("the slot's bundle (%s) carries no %s image: this image cannot run Kubernetes", bundleIndex, strings.TrimSuffix(prefix, ":"))
}

func kubeadmConfig(h *Host, c *machineconfig.Config) ([]byte, error) {
	v, err := bundleKubernetesVersion(h)
	if err != nil {
		return nil, err
	}
	return kubeadmconfig.Render(kubeadmconfig.Input{
		Cluster: c.Cluster, NodeName: c.Hostname, KubernetesVersion: v, PodResolvConf: PodResolvConf, Now: h.now(),
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

func applyKubeadmConfig(ctx context.Context, h *Host, c *machineconfig.Config) error {
	if c.Cluster == nil {
		return nil
	}
	b, err := kubeadmConfig(h, c)
	if err != nil {
		return err
	}
	// Rewritten every time: the token's TTL counts from now.
	if _, err := h.writeIfChanged(KubeadmConfigFile, b, 0o600); err != nil {
		return err
	}
	if c.Cluster.IsControlPlane() {
		for name, p := range kubeadmconfig.Patches() {
			if _, err := h.writeIfChanged(filepath.Join(kubeadmconfig.PatchesDir, name), p, 0o644); err != nil {
				return err
			}
		}
	}
	if c.Cluster.Role == machineconfig.RoleInit {
		m, err := addons.Flannel(addons.FlannelInput{PodCIDR: c.Cluster.PodCIDR, Image: flannelImage(h), APIPort: machineconfig.LocalAPIPort})
		if err != nil {
			return err
		}
		if _, err := h.writeIfChanged(FlannelManifest, m, 0o644); err != nil {
			return err
		}
		dns, err := addons.CoreDNSConfig(kubeadmconfig.DNSDomain)
		if err != nil {
			return err
		}
		if _, err := h.writeIfChanged(CoreDNSManifest, dns, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func verifyKubeadmConfig(ctx context.Context, h *Host, c *machineconfig.Config) error {
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
		for name, p := range kubeadmconfig.Patches() {
			f := filepath.Join(kubeadmconfig.PatchesDir, name)
			if got, err := os.ReadFile(h.Path(f)); err != nil || string(got) != string(p) {
				return fmt.Errorf("kubeadm patch %s is missing or differs from this image's", f)
			}
		}
	}
	return nil
}

// flannelImage is the flannel image the bundle carries.
func flannelImage(h *Host) string {
	b, _ := os.ReadFile(h.Path(bundleIndex))
	const prefix = `"docker.io/flannel/flannel:`
	if i := strings.Index(string(b), prefix); i >= 0 {
		rest := string(b)[i+1:]
		if j := strings.Index(rest, `"`); j > 0 {
			return rest[:j]
		}
	}
	return addons.DefaultFlannelImage
}

// kubeadmStep is one kubeadm phase (or our own step) of a role's sequence.
type kubeadmStep struct {
	name string
	args []string // kubeadm arguments; nil for a step of our own
	own  func(ctx context.Context, h *Host, c *machineconfig.Config) error
}

const ignorePreflight = "--ignore-preflight-errors=SystemVerification"

func steps(c *machineconfig.Cluster) []kubeadmStep {
	cfg := "--config=" + KubeadmConfigFile
	k := func(args ...string) kubeadmStep {
		return kubeadmStep{name: strings.Join(args[:len(args)], " "), args: append(args, cfg)}
	}
	switch c.Role {
	case machineconfig.RoleInit:
		pre := k("init", "phase", "preflight")
		pre.args = append(pre.args, ignorePreflight)
		return []kubeadmStep{
			pre,
			k("init", "phase", "certs", "all"),
			k("init", "phase", "kubeconfig", "all"),
			k("init", "phase", "etcd", "local"),
			k("init", "phase", "control-plane", "all"),
			k("init", "phase", "kubelet-start"),
			{name: "wait for the control plane", own: waitForLocalAPI},
			k("init", "phase", "upload-config", "all"),
			k("init", "phase", "mark-control-plane"),
			k("init", "phase", "bootstrap-token"),
			k("init", "phase", "kubelet-finalize", "all"),
			{name: "cluster DNS configuration", own: applyCoreDNSConfig},
			k("init", "phase", "addon", "coredns"),
			k("init", "phase", "addon", "kube-proxy"),
			{name: "pod network (flannel)", own: applyFlannel},
			{name: "admin kubeconfig", own: installAdminKubeconfig},
		}
	case machineconfig.RoleControlPlane:
		pre := k("join", "phase", "preflight")
		pre.args = append(pre.args, ignorePreflight)
		return []kubeadmStep{
			{name: stepWaitForAPI, own: waitForAPI},
			pre,
			k("join", "phase", "control-plane-prepare", "all"),
			k("join", "phase", "kubelet-start"),
			k("join", "phase", "etcd-join"),
			k("join", "phase", "kubelet-wait-bootstrap"),
			k("join", "phase", "control-plane-join", "all"),
			{name: "wait for the control plane", own: waitForLocalAPI},
		}
	default:
		pre := k("join", "phase", "preflight")
		pre.args = append(pre.args, ignorePreflight)
		return []kubeadmStep{
			{name: stepWaitForAPI, own: waitForAPI},
			pre,
			// kubelet-start only starts the kubelet, and kubeadm's
			// kubelet-wait-bootstrap cannot run alone on a worker (it
			// wants admin.conf): our own step waits for the TLS
			// bootstrap and deletes the token credential as kubeadm's
			// would.
			k("join", "phase", "kubelet-start"),
			{name: "kubelet TLS bootstrap", own: waitForKubeletBootstrap},
		}
	}
}

// kubeadmProgress records the steps done, on TERRA-STATE: after a power
// cut, provisioning resumes after the last step that completed.
type kubeadmProgress struct {
	// Config is the hash of the kubeadm configuration the steps ran with.
	Config string   `json:"config"`
	Done   []string `json:"done"`
}

func progressPath(h *Host) string {
	return h.Path(filepath.Join(layout.StateMount, layout.StateTerrarium, kubeadmProgressRel))
}

// readProgress reads the saved progress, whatever configuration it ran
// with; nil when there is none.
func readProgress(h *Host) (*kubeadmProgress, error) {
	b, err := os.ReadFile(progressPath(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var saved kubeadmProgress
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, fmt.Errorf("%s: %w", progressPath(h), err)
	}
	return &saved, nil
}

// loadProgress is the saved progress if it ran with the configuration
// hashed cfgHash, else a fresh start.
func loadProgress(h *Host, cfgHash string) (*kubeadmProgress, error) {
	saved, err := readProgress(h)
	if err != nil {
		return nil, err
	}
	if saved != nil && saved.Config == cfgHash {
		return saved, nil
	}
	return &kubeadmProgress{Config: cfgHash}, nil
}

// tokenUsed reports whether the node is past the step that uses the
// bootstrap token, with any configuration: the init node created it in the
// cluster, a joiner reached the API with it. Its expiry no longer matters.
func tokenUsed(h *Host, role string) bool {
	saved, err := readProgress(h)
	if err != nil || saved == nil {
		return false
	}
	if role == machineconfig.RoleInit {
		return saved.done(stepBootstrapToken)
	}
	return saved.done(stepWaitForAPI)
}

func (p *kubeadmProgress) done(step string) bool {
	for _, d := range p.Done {
		if d == step {
			return true
		}
	}
	return false
}

func (p *kubeadmProgress) save(h *Host, step string) error {
	p.Done = append(p.Done, step)
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(progressPath(h)), 0o755); err != nil {
		return err
	}
	return writeFileSync(progressPath(h), append(b, '\n'), 0o644)
}

func applyKubernetes(ctx context.Context, h *Host, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	h.cluster(func(s *ClusterStatus) { s.Role = cl.Role })
	want, err := bundleKubernetesVersion(h)
	if err != nil {
		return err
	}
	out, err := h.output(ctx, "kubeadm", "version", "-o", "short")
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(out); got != want {
		return fmt.Errorf("kubeadm is %s but the slot's bundle carries Kubernetes %s: this image is inconsistent", got, want)
	}
	cfg, err := os.ReadFile(h.Path(KubeadmConfigFile))
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(withoutTTL(cfg)))
	prog, err := loadProgress(h, hex.EncodeToString(sum[:]))
	if err != nil {
		return err
	}
	for _, st := range steps(cl) {
		if prog.done(st.name) {
			continue
		}
		h.cluster(func(s *ClusterStatus) { s.Step = st.name })
		h.progress(st.name, "started", "")
		var err error
		for attempt := 1; attempt <= h.attempts(); attempt++ {
			if st.own != nil {
				err = st.own(ctx, h, c)
			} else {
				_, err = h.output(ctx, "kubeadm", st.args...)
			}
			if err == nil || ctx.Err() != nil {
				break
			}
			h.progress(st.name, "retry", fmt.Sprintf("attempt %d of %d failed: %v", attempt, h.attempts(), err))
			h.progress(st.name, "diagnostics", diagnostics(ctx, h))
			if attempt < h.attempts() {
				select {
				case <-ctx.Done():
				case <-time.After(h.delay(stepRetryDelay)):
				}
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		// kubeadm does not sync what it writes: without this, a power
		// cut could keep the record of a step and lose its files.
		if err := h.run(ctx, "sync"); err != nil {
			return err
		}
		if err := prog.save(h, st.name); err != nil {
			return err
		}
		h.progress(st.name, "done", "")
	}
	h.cluster(func(s *ClusterStatus) { s.Step = "joined" })
	if cl.Role == machineconfig.RoleInit {
		h.cluster(func(s *ClusterStatus) { s.Step, s.AdminKubeconfig = "formed the cluster", AdminKubeconfig })
	}
	return nil
}

// waitForAPI waits until the API answers through the node's balancer:
// nodes may boot in any order, and joiners wait for the init node.
func waitForAPI(ctx context.Context, h *Host, c *machineconfig.Config) error {
	return waitForReadyz(ctx, h, c, c.Cluster.APIEndpoint(), apiWaitTimeout)
}

// waitForLocalAPI waits until this control plane's own API server is
// ready (kubeadm's wait-control-plane phase takes no configuration, so its
// timeout cannot be raised for emulated machines).
func waitForLocalAPI(ctx context.Context, h *Host, c *machineconfig.Config) error {
	return waitForReadyz(ctx, h, c, netip.AddrPortFrom(netip.MustParseAddr(c.Cluster.NodeIP), machineconfig.APIServerPort).String(), localAPIWaitTimeout)
}

// waitForKubeletBootstrap waits until a joining kubelet holds its client
// certificate (its CSR signed by the controller manager), then deletes
// bootstrap-kubelet.conf: the bootstrap token is not left on the node.
func waitForKubeletBootstrap(ctx context.Context, h *Host, c *machineconfig.Config) error {
	if err := waitForFiles(ctx, h, readyWaitTimeout, KubeletKubeconfig, KubeletClientCert); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("the kubelet did not finish its TLS bootstrap (no %s) after %s; is the controller manager running on a control plane?", KubeletClientCert, readyWaitTimeout)
	}
	if err := os.Remove(h.Path(BootstrapKubeconfig)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the bootstrap credential: %w", err)
	}
	return nil
}

// waitForFiles polls until every path exists, for up to timeout. After
// the timeout it returns the first missing path's error; when ctx ends,
// ctx's error.
func waitForFiles(ctx context.Context, h *Host, timeout time.Duration, paths ...string) error {
	deadline := time.Now().Add(timeout)
	for {
		var missing error
		for _, p := range paths {
			if _, err := os.Stat(h.Path(p)); err != nil {
				missing = err
				break
			}
		}
		if missing == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return missing
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.delay(5 * time.Second)):
		}
	}
}

// diagnostics collects what helps a person see why a step fails: the
// kubelet's last log lines and the containers it runs.
func diagnostics(ctx context.Context, h *Host) string {
	var b strings.Builder
	if out, err := h.Exec(ctx, "journalctl", "-u", "kubelet.service", "--no-pager", "-n", "12", "-o", "cat"); err == nil {
		b.WriteString("kubelet log:\n" + strings.TrimSpace(string(out)) + "\n")
	}
	if out, err := h.Exec(ctx, "ctr", "-n", "k8s.io", "tasks", "ls"); err == nil {
		b.WriteString("containers:\n" + strings.TrimSpace(string(out)) + "\n")
	}
	for _, pod := range []string{"etcd", "kube-apiserver"} {
		if tail := podLogTail(h, pod, 8); tail != "" {
			b.WriteString(pod + " log:\n" + tail + "\n")
		}
	}
	return strings.TrimSpace(b.String())
}

// podLogTail is the last n lines of the newest log of a static pod's
// container (kubelet writes /var/log/pods/<ns>_<pod>-<node>_<uid>/<container>/<restart>.log).
func podLogTail(h *Host, container string, n int) string {
	logs, _ := filepath.Glob(h.Path("/var/log/pods/kube-system_" + container + "-*/" + container + "/*.log"))
	var newest string
	var newestTime time.Time
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.ModTime().After(newestTime) {
			newest, newestTime = l, fi.ModTime()
		}
	}
	if newest == "" {
		return ""
	}
	b, err := os.ReadFile(newest)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitForReadyz polls an API server's /readyz, verifying it with the
// cluster CA, until it answers.
func waitForReadyz(ctx context.Context, h *Host, c *machineconfig.Config, endpoint string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := "https://" + endpoint + "/readyz"
	for {
		// Only 200 is ready. kubeadm's clusters serve /readyz to anonymous
		// clients (system:public-info-viewer), but an API server that has
		// just (re)started answers 403 until its RBAC bootstrap hook has
		// run: proceeding then makes kubeadm's next phase fail with
		// "forbidden". The local balancer (pkg/apilb) judges the same way.
		code, err := h.probe(ctx, url, c.Cluster.CACert)
		if err == nil && code == http.StatusOK {
			h.cluster(func(s *ClusterStatus) { s.APIUp = true })
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s answered %d", url, code)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API at %s (control planes %s) did not answer within %s: %w",
				endpoint, strings.Join(c.Cluster.ControlPlanes, ", "), timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.delay(5 * time.Second)):
		}
	}
}

// applyCoreDNSConfig creates CoreDNS's air-gapped Corefile before
// kubeadm's add-on phase, which keeps it (see addons.CoreDNSConfig).
func applyCoreDNSConfig(ctx context.Context, h *Host, c *machineconfig.Config) error {
	_, err := h.output(ctx, "kubectl", "--kubeconfig="+AdminKubeconfig, "apply", "--server-side", "--force-conflicts", "-f", CoreDNSManifest)
	return err
}

func applyFlannel(ctx context.Context, h *Host, c *machineconfig.Config) error {
	_, err := h.output(ctx, "kubectl", "--kubeconfig="+AdminKubeconfig, "apply", "--server-side", "--force-conflicts", "-f", FlannelManifest)
	return err
}

// installAdminKubeconfig gives the admin user the admin kubeconfig (the
// control-plane components never use it: kubeadm gives each its own).
func installAdminKubeconfig(ctx context.Context, h *Host, c *machineconfig.Config) error {
	name := adminName(c)
	if name == "" {
		return nil
	}
	b, err := os.ReadFile(h.Path(AdminKubeconfig))
	if err != nil {
		return err
	}
	dst := filepath.Join("/home", name, ".kube", "config")
	if _, err := h.writeIfChanged(dst, b, 0o600); err != nil {
		return err
	}
	return h.run(ctx, "chown", "-R", name+":"+name, filepath.Join("/home", name, ".kube"))
}

// verifyKubernetes: kubelet runs, control planes have their static pods,
// and the node is Ready. It waits for readiness (a fresh boot needs a
// while), and reports the cluster's state.
func verifyKubernetes(ctx context.Context, h *Host, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	h.cluster(func(s *ClusterStatus) { s.Role = cl.Role })
	deadline := time.Now().Add(readyWaitTimeout)
	// A joining kubelet writes its kubeconfig once its TLS bootstrap
	// is done, a little after kubeadm returned.
	if err := waitForFiles(ctx, h, readyWaitTimeout, KubeletKubeconfig); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("the node has not joined (no kubelet kubeconfig after %s): %w", readyWaitTimeout, err)
	}
	if cl.IsControlPlane() {
		for _, m := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if _, err := os.Stat(h.Path("/etc/kubernetes/manifests/" + m + ".yaml")); err != nil {
				return fmt.Errorf("static pod %s is missing: %w", m, err)
			}
		}
	}
	if cl.Role == machineconfig.RoleInit {
		h.cluster(func(s *ClusterStatus) { s.AdminKubeconfig = AdminKubeconfig })
	}
	if err := h.run(ctx, "systemctl", "is-active", "--quiet", "kubelet.service"); err != nil {
		if err := h.run(ctx, "systemctl", "restart", "kubelet.service"); err != nil {
			return fmt.Errorf("kubelet is not running and does not restart: %w", err)
		}
	}
	poller := newNodePoller(h, c)
	for polls := 1; ; polls++ {
		ready, total, mine, err := poller.poll(ctx, c.Hostname)
		if polls%24 == 0 {
			why := "node " + c.Hostname + " is not Ready yet"
			if err != nil {
				why = err.Error()
			}
			h.progress("node ready", "waiting", why+"\n"+diagnostics(ctx, h))
		}
		if err == nil {
			h.cluster(func(s *ClusterStatus) {
				s.APIUp, s.Nodes = true, fmt.Sprintf("%d/%d nodes Ready", ready, total)
			})
			if mine {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("node %s is not Ready", c.Hostname)
			}
			return fmt.Errorf("after %s: %w", readyWaitTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.delay(5 * time.Second)):
		}
	}
}

// nodePoller asks the API how many nodes are Ready and whether this one
// is. A control plane lists them all with the admin kubeconfig; a worker's
// kubelet may only read its own Node (the Node authorizer), so a worker
// reports itself alone. The client is made on the first poll that can
// (the kubelet's credentials may not be there yet) and kept, so that polls
// share one connection (see pkg/kubeclient).
type nodePoller struct {
	h          *Host
	kubeconfig string
	all        bool
	client     NodeReader
}

func newNodePoller(h *Host, c *machineconfig.Config) *nodePoller {
	p := &nodePoller{h: h, kubeconfig: KubeletKubeconfig}
	if _, err := os.Stat(h.Path(AdminKubeconfig)); err == nil && c.Cluster.IsControlPlane() {
		p.kubeconfig, p.all = AdminKubeconfig, true
	}
	return p
}

func (p *nodePoller) poll(ctx context.Context, hostname string) (ready, total int, mine bool, err error) {
	list, err := p.list(ctx, hostname)
	if err != nil {
		p.h.cluster(func(s *ClusterStatus) { s.APIUp = false })
		return 0, 0, false, err
	}
	for _, n := range list {
		total++
		if n.Ready {
			ready++
			mine = mine || n.Name == hostname
		}
	}
	return ready, total, mine, nil
}

func (p *nodePoller) list(ctx context.Context, hostname string) ([]kubeclient.Node, error) {
	if p.client == nil {
		c, err := p.h.kubeClient(p.kubeconfig)
		if err != nil {
			return nil, err
		}
		p.client = c
	}
	if p.all {
		return p.client.Nodes(ctx)
	}
	n, err := p.client.Node(ctx, hostname)
	return []kubeclient.Node{n}, err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
