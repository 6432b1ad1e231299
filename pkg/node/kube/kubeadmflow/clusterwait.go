package kubeadmflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// waitForAPI waits until the API answers through the node's balancer:
// nodes may boot in any order, and joiners wait for the init node.
//
// Then, until the cluster can be joined: its cluster-info ConfigMap is
// signed for this node's token (the init node's bootstrap-token step
// creates both, the controller manager's bootstrap signer signs). kubeadm's
// discovery, which asks for the same, waits five seconds after each miss;
// this asks every APIPoll.
//
// A worker runs no kubeadm discovery, which needs that signature: it
// trusts the API by the CA its config carries, and waits only until it can
// join (waitForJoinable), not for the controller manager's signer.
//
// Meanwhile a worker reads the programs it starts next into the page cache
// (readAheadPrograms).
func waitForAPI(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	deadline := time.Now().Add(apiWaitTimeout)
	if c.Cluster.Role != machineconfig.RoleWorker {
		if err := waitForReadyz(ctx, h, c, c.Cluster.APIEndpoint(), apiWaitTimeout); err != nil {
			return err
		}
		return waitForClusterInfo(ctx, h, c, time.Until(deadline))
	}
	return whileReadingAhead(ctx, readAheadPrograms(h), func() error {
		if err := waitForReadyz(ctx, h, c, c.Cluster.APIEndpoint(), apiWaitTimeout); err != nil {
			return err
		}
		return waitForJoinable(ctx, h, c, time.Until(deadline))
	})
}

// waitForJoinable waits until a worker's kubelet can join: the init node's
// bootstrap-token step is done (cluster-info is readable anonymously, the
// step's last rule, after the token, its CSRs' rules and their automatic
// approval), and the node's own token authenticates (it may read Nodes:
// its Node, or that there is none). The signature on cluster-info, the
// controller manager's, can come a minute after the step, all of it on
// the worker's path (docs/benchmarks.md).
func waitForJoinable(ctx context.Context, h *Flow, c *machineconfig.Config, timeout time.Duration) error {
	url := "https://" + c.Cluster.APIEndpoint() + clusterInfoPath
	probe, closeProbe := h.Probe(c.Cluster.CACert)
	defer closeProbe()
	return withJoinClient(h, c.Cluster, func(api APIClient) error {
		err := pollAPI(ctx, h, timeout, func() error {
			code, body, err := probe(ctx, url)
			if err != nil {
				return err
			}
			if err := clusterInfoPublished(code, body); err != nil {
				return err
			}
			if _, err := api.Node(ctx, c.Hostname); err != nil && !errors.Is(err, kubeclient.ErrNotFound) {
				return fmt.Errorf("the node's bootstrap token cannot read its Node yet: %w", err)
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("the cluster cannot be joined yet: %w (is the init node past its step %q, with this node's token?)", err, stepBootstrapToken)
		}
		return err
	})
}

// clusterInfoPath is kubeadm's cluster-info ConfigMap, which anonymous
// clients may read.
const clusterInfoPath = "/api/v1/namespaces/kube-public/configmaps/cluster-info"

// waitForClusterInfo waits until the cluster-info ConfigMap at the API
// endpoint carries a JWS signature for the config's bootstrap token.
func waitForClusterInfo(ctx context.Context, h *Flow, c *machineconfig.Config, timeout time.Duration) error {
	tokenID, _, _ := strings.Cut(c.Cluster.Token, ".")
	url := "https://" + c.Cluster.APIEndpoint() + clusterInfoPath
	probe, closeProbe := h.Probe(c.Cluster.CACert)
	defer closeProbe()
	err := pollAPI(ctx, h, timeout, func() error {
		code, body, err := probe(ctx, url)
		if err != nil {
			return err
		}
		return clusterInfoSigned(code, body, tokenID)
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("the cluster cannot be joined yet: %w (is the init node past its step %q, and a controller manager running?)", err, stepBootstrapToken)
	}
	return err
}

// pollAPI asks check every APIPoll until it returns nil, and returns nil
// then; after timeout, check's last error; when ctx ends, ctx's error.
func pollAPI(ctx context.Context, h *Flow, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Timing.APIPoll):
		}
	}
}

// clusterInfoSigned says why an answer to GET cluster-info is not yet one
// signed for tokenID (nil when it is).
func clusterInfoSigned(code int, body []byte, tokenID string) error {
	data, err := clusterInfoData(code, body)
	if err != nil {
		return err
	}
	if data["jws-kubeconfig-"+tokenID] == "" {
		return fmt.Errorf("cluster-info is not signed for token %s yet", tokenID)
	}
	return nil
}

// clusterInfoPublished says why an answer to GET cluster-info is not yet
// the published ConfigMap (nil when it is).
func clusterInfoPublished(code int, body []byte) error {
	data, err := clusterInfoData(code, body)
	if err != nil {
		return err
	}
	if data["kubeconfig"] == "" {
		return errors.New("cluster-info holds no kubeconfig yet")
	}
	return nil
}

// clusterInfoData is the data of an answer to GET cluster-info.
func clusterInfoData(code int, body []byte) (map[string]string, error) {
	if code != http.StatusOK {
		return nil, fmt.Errorf("cluster-info: the API answered %d", code)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, fmt.Errorf("cluster-info: %w", err)
	}
	return cm.Data, nil
}

// waitForLocalAPI waits until this control plane's own API server is
// ready (kubeadm's wait-control-plane phase takes no configuration, so its
// timeout cannot be raised for emulated machines).
func waitForLocalAPI(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	return waitForReadyz(ctx, h, c, netip.AddrPortFrom(netip.MustParseAddr(c.Cluster.NodeIP), machineconfig.APIServerPort).String(), localAPIWaitTimeout)
}

// waitForRuntime waits until containerd answers the CRI the way kubeadm's
// CRI and ContainerRuntimeVersion preflight checks ask (see cri.Check),
// each question with runtimeCallTimeout. kubeadm gives those checks a
// fixed two seconds, which an emulated node short of CPU misses, and a
// missed check costs a retry of the whole preflight. They are warnings
// for kubeadm (ignorePreflight) because this step asked first.
func waitForRuntime(ctx context.Context, h *Flow, _ *machineconfig.Config) error {
	deadline := h.Now().Add(runtimeWaitTimeout)
	for {
		callCtx, cancel := context.WithTimeout(ctx, runtimeCallTimeout)
		_, err := h.Runtime.Check(callCtx, kubeadmconfig.CRISocket)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !h.Now().Before(deadline) {
			return fmt.Errorf("the container runtime did not become ready in %s (is containerd.service running? `journalctl -u containerd`): %w", runtimeWaitTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Timing.FilePoll):
		}
	}
}

// waitForKubeletBootstrap waits until a joining kubelet holds its client
// certificate (its CSR signed by the controller manager), then deletes
// bootstrap-kubelet.conf: the bootstrap token is not left on the node.
func waitForKubeletBootstrap(ctx context.Context, h *Flow, c *machineconfig.Config) error {
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
func waitForFiles(ctx context.Context, h *Flow, timeout time.Duration, paths ...string) error {
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
		case <-time.After(h.Timing.FilePoll):
		}
	}
}

// diagnostics collects what helps a person see why a step fails: the
// kubelet's last log lines and the containers it runs.
func diagnostics(ctx context.Context, h *Flow) string {
	var b strings.Builder
	if out, err := h.Command(ctx, "journalctl", "-u", "kubelet.service", "--no-pager", "-n", "12", "-o", "cat"); err == nil {
		b.WriteString("kubelet log:\n" + strings.TrimSpace(string(out)) + "\n")
	}
	if out, err := h.Command(ctx, "ctr", "-n", "k8s.io", "tasks", "ls"); err == nil {
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
func podLogTail(h *Flow, container string, n int) string {
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
func waitForReadyz(ctx context.Context, h *Flow, c *machineconfig.Config, endpoint string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := "https://" + endpoint + "/readyz"
	probe, closeProbe := h.Probe(c.Cluster.CACert)
	defer closeProbe()
	for {
		// Only 200 is ready. kubeadm's clusters serve /readyz to anonymous
		// clients (system:public-info-viewer), but an API server that has
		// just (re)started answers 403 until its RBAC bootstrap hook has
		// run: proceeding then makes kubeadm's next phase fail with
		// "forbidden". The local balancer (pkg/node/kube/apilb) judges the same way.
		code, _, err := probe(ctx, url)
		if err == nil && code == http.StatusOK {
			h.Cluster(func(s *ClusterStatus) { s.APIUp = true })
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
		case <-time.After(h.Timing.APIPoll):
		}
	}
}

// verifyKubernetes looks at what the kubeadm steps leave on the node: the
// kubelet's kubeconfig (a joining kubelet writes it once its TLS
// bootstrap is done) and, on a control plane, its static pods'
// manifests. It only looks: whether the node is Ready is the next
// phase's (PhaseKubernetesReady).
func verifyKubernetes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	if _, err := os.Stat(h.Path(KubeletKubeconfig)); err != nil {
		return fmt.Errorf("the node has not joined (no kubelet kubeconfig %s): %w", KubeletKubeconfig, err)
	}
	return staticPodsPresent(h, cl)
}

// staticPods are the control plane's static pods, as kubeadm names their
// manifests.
var staticPods = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// staticPodsPresent: a control plane has its four static pods' manifests.
func staticPodsPresent(h *Flow, cl *machineconfig.Cluster) error {
	if !cl.IsControlPlane() {
		return nil
	}
	for _, m := range staticPods {
		if _, err := os.Stat(h.Path(ManifestsDir + "/" + m + ".yaml")); err != nil {
			return fmt.Errorf("static pod %s is missing: %w", m, err)
		}
	}
	return nil
}

// applyKubernetesReady brings a joined node to Ready and waits for it: the
// kubelet started if it is not running (a kubelet that failed at boot),
// then the node's Ready condition and its pod network (waitForPodNetwork).
// A fresh boot needs a while; this is where the waiting is, bounded by
// readyWaitTimeout and podNetworkWaitTimeout.
func applyKubernetesReady(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	h.Cluster(func(s *ClusterStatus) { s.Role = cl.Role })
	deadline := time.Now().Add(readyWaitTimeout)
	// A joining kubelet writes its kubeconfig once its TLS bootstrap
	// is done, a little after kubeadm returned.
	if err := waitForFiles(ctx, h, readyWaitTimeout, KubeletKubeconfig); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("the node has not joined (no kubelet kubeconfig after %s): %w", readyWaitTimeout, err)
	}
	if err := staticPodsPresent(h, cl); err != nil {
		return err
	}
	showAdminKubeconfig(h, cl)
	if err := h.Run(ctx, "systemctl", "is-active", "--quiet", "kubelet.service"); err != nil {
		if err := h.Run(ctx, "systemctl", "restart", "kubelet.service"); err != nil {
			return fmt.Errorf("kubelet is not running and does not restart: %w", err)
		}
	}
	poller := newNodePoller(h, c)
	for polls := 1; ; polls++ {
		ready, total, mine, err := poller.poll(ctx, c.Hostname)
		if polls%diagnosticsEveryPolls == 0 {
			why := "node " + c.Hostname + " is not Ready yet"
			if err != nil {
				why = err.Error()
			}
			h.Report.Report("node ready", step.Waiting, why+"\n"+diagnostics(ctx, h))
		}
		if err == nil {
			poller.record(ready, total, mine)
			if mine {
				return waitForPodNetwork(ctx, h)
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
		case <-time.After(h.Timing.APIPoll):
		}
	}
}

// verifyKubernetesReady looks once, without waiting or acting: the
// kubelet runs, the API says this node is Ready, and its pod network is
// up. What it saw of the cluster goes into the status.
func verifyKubernetesReady(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	h.Cluster(func(s *ClusterStatus) { s.Role = cl.Role })
	showAdminKubeconfig(h, cl)
	if err := h.Run(ctx, "systemctl", "is-active", "--quiet", "kubelet.service"); err != nil {
		return fmt.Errorf("the kubelet is not running: %w", err)
	}
	poller := newNodePoller(h, c)
	ready, total, mine, err := poller.poll(ctx, c.Hostname)
	if err != nil {
		return fmt.Errorf("ask the API whether node %s is Ready: %w", c.Hostname, err)
	}
	poller.record(ready, total, mine)
	if !mine {
		return fmt.Errorf("node %s is not Ready", c.Hostname)
	}
	missing, err := podNetworkMissing(ctx, h)
	if err != nil {
		return fmt.Errorf("ask the container runtime for the pod network's containers: %w", err)
	}
	if missing != "" {
		return fmt.Errorf("node %s is Ready but its pod network is not: %s", c.Hostname, missing)
	}
	return nil
}

// showAdminKubeconfig puts the init node's admin kubeconfig in the
// status, for the person who formed the cluster.
func showAdminKubeconfig(h *Flow, cl *machineconfig.Cluster) {
	if cl.Role == machineconfig.RoleInit {
		h.Cluster(func(s *ClusterStatus) { s.AdminKubeconfig = AdminKubeconfig })
	}
}

// podNetworkContainers are the node's own pods' containers (the CNI's and
// kube-proxy's DaemonSets) that must run before a pod on this node can
// reach another: flanneld leases the node's pod subnet, kube-proxy
// programs Services.
var podNetworkContainers = []string{"kube-flannel", "kube-proxy"}

// waitForPodNetwork waits, once the node is Ready, until the node can run
// pods that talk to each other: flanneld holds the node's lease (its
// subnet.env, which the CNI plugin reads for every pod) and the flannel and
// kube-proxy containers run. The Node's Ready condition says neither: the
// kubelet reports Ready once a CNI config exists, while the DaemonSets'
// images may still be unpacking (minutes on a slow node), and every pod
// scheduled here meanwhile fails to get a sandbox. It asks at the API
// polls' pace: two CRI calls a poll on a node that may be starved.
func waitForPodNetwork(ctx context.Context, h *Flow) error {
	deadline := h.Now().Add(podNetworkWaitTimeout)
	for polls := 1; ; polls++ {
		missing, err := podNetworkMissing(ctx, h)
		if err == nil && missing == "" {
			return nil
		}
		if err == nil {
			err = errors.New(missing)
		}
		switch {
		case polls == 1:
			h.Report.Report("pod network", step.Waiting, err.Error())
		case polls%diagnosticsEveryPolls == 0:
			h.Report.Report("pod network", step.Waiting, err.Error()+"\n"+diagnostics(ctx, h))
		}
		if !h.Now().Before(deadline) {
			return fmt.Errorf("the node is Ready but its pod network is not, after %s: %w (`crictl ps -a`, `crictl logs` of kube-flannel and kube-proxy)", podNetworkWaitTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Timing.APIPoll):
		}
	}
}

// podNetworkMissing says what of the pod network is not there yet ("" when
// all is).
func podNetworkMissing(ctx context.Context, h *Flow) (string, error) {
	var missing []string
	for _, name := range podNetworkContainers {
		callCtx, cancel := context.WithTimeout(ctx, runtimeCallTimeout)
		running, err := h.Runtime.Running(callCtx, kubeadmconfig.CRISocket, name)
		cancel()
		if err != nil {
			return "", err
		}
		if !running {
			missing = append(missing, "no running "+name+" container")
		}
	}
	if _, err := os.Stat(h.Path(FlannelSubnetEnv)); err != nil {
		missing = append(missing, "flanneld has not leased the node's pod subnet (no "+FlannelSubnetEnv+")")
	}
	return strings.Join(missing, "; "), nil
}

// nodePoller asks the API how many nodes are Ready and whether this one
// is. A control plane lists them all with the admin kubeconfig; a worker's
// kubelet may only read its own Node (the Node authorizer), so a worker
// reports itself alone. The client is made on the first poll that can
// (the kubelet's credentials may not be there yet) and kept, so that polls
// share one connection (see pkg/node/kube/kubeclient).
type nodePoller struct {
	h          *Flow
	kubeconfig string
	all        bool
	client     NodeReader
}

func newNodePoller(h *Flow, c *machineconfig.Config) *nodePoller {
	p := &nodePoller{h: h, kubeconfig: KubeletKubeconfig}
	if _, err := os.Stat(h.Path(AdminKubeconfig)); err == nil && c.Cluster.IsControlPlane() {
		p.kubeconfig, p.all = AdminKubeconfig, true
	}
	return p
}

func (p *nodePoller) poll(ctx context.Context, hostname string) (ready, total int, mine bool, err error) {
	list, err := p.list(ctx, hostname)
	if err != nil {
		p.h.Cluster(func(s *ClusterStatus) { s.APIUp = false })
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

// record puts what a poll that answered saw into the cluster's status.
func (p *nodePoller) record(ready, total int, mine bool) {
	p.h.Cluster(func(s *ClusterStatus) {
		s.APIUp, s.Nodes, s.NodesAt = true, p.summary(ready, total, mine), p.h.Now()
	})
}

// summary says what the poll saw: all the cluster's nodes on a control
// plane, this node alone on a worker (which may read no other Node).
func (p *nodePoller) summary(ready, total int, mine bool) string {
	switch {
	case p.all:
		return fmt.Sprintf("%d/%d nodes Ready", ready, total)
	case mine:
		return "this node Ready"
	default:
		return "this node not Ready yet"
	}
}

func (p *nodePoller) list(ctx context.Context, hostname string) ([]kubeclient.Node, error) {
	if p.client == nil {
		c, err := p.h.API(p.kubeconfig)
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
