package kubeadmflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/nodephases"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/step"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// kubeadmStep is one kubeadm phase (or our own step) of a role's sequence.
type kubeadmStep struct {
	name string
	args []string // kubeadm arguments; nil for a step of our own
	own  func(ctx context.Context, h *Flow, c *machineconfig.Config) error
	// oneAtATime: run while holding the cluster's join lock (see
	// withJoinLock), never alongside the same step on another node.
	oneAtATime bool
}

// ignorePreflight is kubeadm's flag for the preflight checks reported as
// warnings: SystemVerification always (it reads the running kernel's
// config, which an appliance kernel does not ship), CRI and
// ContainerRuntimeVersion always (their two-second deadline is too short
// for an emulated node; the container runtime step has asked the same
// questions just before, with a minute each), and those the config names.
func ignorePreflight(c *machineconfig.Cluster) string {
	return "--ignore-preflight-errors=" + strings.Join(ignoredChecks(c), ",")
}

// ignoredChecks are the preflight checks ignorePreflight names.
func ignoredChecks(c *machineconfig.Cluster) []string {
	return append([]string{"SystemVerification", "CRI", "ContainerRuntimeVersion"}, c.IgnorePreflightErrors...)
}

// upgradeIgnoredChecks are the preflight checks a Kubernetes upgrade
// reports as warnings: ignoredChecks, and CreateJob. kubeadm's upgrade
// apply runs a Job (the pause image) and gives it a fixed minute, which
// no configuration extends, to be scheduled and complete. On the first
// control plane's trial boot its own control plane has just restarted
// and the node is cordoned, so the Job runs on another node, and on an
// emulated cluster that takes longer than the minute ("did not complete
// in 1m0s", and the trial fails: docs/operations/qemu-ci.md). The
// rollout has checked much of what the Job would: the node's drain was
// served by the API and the controllers, and a node before it in the
// rollout passed its health gate on the new release.
func upgradeIgnoredChecks(c *machineconfig.Cluster) []string {
	return append(ignoredChecks(c), "CreateJob")
}

func steps(c *machineconfig.Cluster) []kubeadmStep {
	cfg := "--config=" + KubeadmConfigFile
	k := func(args ...string) kubeadmStep {
		return kubeadmStep{name: strings.Join(args, " "), args: append(args, cfg)}
	}
	// The container runtime answering, a control plane's images present,
	// then the preflight of kubeadm init or join, with the checks it
	// ignores.
	runtime := kubeadmStep{name: stepRuntime, own: waitForRuntime}
	images := kubeadmStep{name: stepImages, own: pullImages}
	preflight := func(verb string) kubeadmStep {
		s := k(verb, "phase", "preflight")
		s.args = append(s.args, ignorePreflight(c))
		return s
	}
	switch c.Role {
	case machineconfig.RoleInit:
		// The workloads' add-ons once the cluster runs: a workload's
		// claim or autoscaler waits for them, not the cluster. The
		// default StorageClass; the resource metrics API; LoadBalancer
		// addresses.
		var workloads []kubeadmStep
		if c.LocalStorageEnabled() {
			workloads = append(workloads, kubeadmStep{name: stepLocalStorage, own: applyAddon(addonLocalStorage)})
		}
		if c.MetricsEnabled() {
			workloads = append(workloads, kubeadmStep{name: stepMetrics, own: applyAddon(addonMetrics)})
		}
		if c.LoadBalancerEnabled() {
			workloads = append(workloads, kubeadmStep{name: stepLoadBalancer, own: applyAddon(addonLoadBalancer)})
		}
		return slices.Concat([]kubeadmStep{
			runtime,
			images,
			// Not kubeadm's init preflight: its checks the node's
			// state decides, in-process (nodePreflight).
			{name: stepNodePreflight, own: nodePreflight},
			k("init", "phase", "certs", "all"),
			k("init", "phase", "kubeconfig", "all"),
			// A TERRA-BACKUP stick makes this init node restore the
			// cluster's etcd before its etcd first starts.
			{name: stepRestore, own: restoreEtcd},
			k("init", "phase", "etcd", "local"),
			// kube-apiserver's static pod first; the controller
			// manager's and the scheduler's once the API is ready.
			// Started beside kube-apiserver, they take CPU from its
			// start, and the controller manager exits when the API is
			// not healthy within 10 s of its winning the leader lease
			// ("failed to wait for apiserver being healthy"): its next
			// start then waits out its own lease (60 s, see
			// kubeadmconfig.LeaderElectionArgs) before signing
			// cluster-info or any kubelet's CSR, and the worker waits
			// a minute for each (docs/benchmarks.md).
			k("init", "phase", "control-plane", "apiserver"),
			k("init", "phase", "kubelet-start"),
			{name: "wait for the control plane", own: waitForLocalAPI},
			// Once the API is ready, the rest of kubeadm's init in two
			// kubeadm processes, not eight: each one's start costs the
			// node a couple of CPU seconds, and the worker joining beside
			// it (on the same host cores) got that much less (a tenth
			// of a core while both of the init node's were busy). The
			// first makes the cluster joinable (the token, cluster-info,
			// the bootstrap RBAC) after the controller manager's and
			// the scheduler's static pods, the uploaded configs and the
			// control-plane label; the second ends with the add-ons.
			kubeadmInit(stepBootstrapToken, initJoinablePhases),
			// The pod network as soon as the admin may write (kubeadm
			// binds the admin's group to cluster-admin when upload-config
			// first uses admin.conf): no node is Ready before it runs.
			// NetworkPolicy's enforcement with it, in the same step: a
			// step a formed node has not done runs on its next heal and
			// records the slot's Kubernetes as configured, ahead of the
			// kubernetes-upgrade phase.
			{name: "pod network (flannel)", own: applyAddon(addonPodNetwork)},
			// CoreDNS's air-gapped Corefile before kubeadm's add-on
			// phase, which keeps it (see addons.CoreDNSConfig).
			{name: "cluster DNS configuration", own: applyAddon(addonClusterDNS)},
			kubeadmInit(stepAddons, initAddonPhases),
			{name: "upgrade coordination", own: applyAddon(addonUpgrades)},
		}, workloads, []kubeadmStep{
			{name: "admin kubeconfig", own: installAdminKubeconfig},
		})
	case machineconfig.RoleControlPlane:
		return []kubeadmStep{
			{name: stepWaitForAPI, own: waitForAPI},
			runtime,
			images,
			preflight("join"),
			// The certificates and kubeconfigs now, the control
			// plane's static pods only once the local etcd member
			// exists: written before, kube-apiserver crash-loops
			// against a missing etcd for as long as the node waits for
			// the join lock, and under TCG a waiting joiner takes a
			// whole host core that way, starving the members that are
			// joining (docs/operations/qemu-ci.md).
			k("join", "phase", "control-plane-prepare", "certs"),
			k("join", "phase", "control-plane-prepare", "kubeconfig"),
			{name: stepStaleNode, own: waitForStaleNode},
			k("join", "phase", "kubelet-start"),
			// One control plane at a time from its etcd join until
			// its control plane answers, as kubeadm's HA guide joins
			// them: etcd takes one learner at a time (two voters
			// added before either starts lose the quorum), and a new
			// member's first minutes (catching up, then its
			// kube-apiserver starting) are the heaviest of the join.
			// A member's kube-apiserver starting while the next
			// member is added stalls the API for good
			// (docs/operations/qemu-ci.md).
			oneAtATime(k("join", "phase", "etcd-join")),
			oneAtATime(k("join", "phase", "control-plane-prepare", "control-plane")),
			oneAtATime(k("join", "phase", "kubelet-wait-bootstrap")),
			oneAtATime(k("join", "phase", "control-plane-join", "all")),
			oneAtATime(kubeadmStep{name: "wait for the control plane", own: waitForLocalAPI}),
		}
	default:
		return []kubeadmStep{
			// What needs no API first: the worker, starved beside the
			// init node, does it while the API comes up.
			runtime,
			// Not kubeadm's join preflight: its checks the node's state
			// decides, in-process (nodePreflight).
			{name: stepNodePreflight, own: nodePreflight},
			{name: stepWaitForAPI, own: waitForAPI},
			// kubeadm's kubelet-start, in process (kubeletStart), only
			// starts the kubelet; our own step waits for the TLS
			// bootstrap and deletes the token credential as kubeadm's
			// kubelet-wait-bootstrap would.
			{name: stepStaleNode, own: waitForStaleNode},
			{name: stepKubeletStart, own: kubeletStart},
			{name: "kubelet TLS bootstrap", own: waitForKubeletBootstrap},
		}
	}
}

// The kubeadm steps done are in the node state (nodestate.KubeadmProgress),
// keyed by the node's identity.

// readProgress returns the saved progress, whichever node it ran for; nil
// when there is none.
func readProgress(h *Flow) *nodestate.KubeadmProgress {
	var p *nodestate.KubeadmProgress
	h.State.Read(func(j *nodestate.Journal) {
		if j.Kubeadm != nil {
			c := *j.Kubeadm
			c.Done = append([]string(nil), j.Kubeadm.Done...)
			p = &c
		}
	})
	return p
}

// loadProgress is the saved progress if it was made by the same node
// (identity, NodeIdentity), else a fresh start. A node's kubeadm
// configuration changes with its token (a --rotate-token disk) without the
// node changing: its steps stay done.
func loadProgress(h *Flow, identity string) *nodestate.KubeadmProgress {
	if saved := readProgress(h); saved != nil && saved.Node == identity {
		return saved
	}
	return &nodestate.KubeadmProgress{Node: identity}
}

// tokenUsed reports whether the node is past the step that uses the
// bootstrap token, with any configuration: the init node created it in the
// cluster, a joiner reached the API with it. Its expiry no longer matters.
func tokenUsed(h *Flow, role string) bool {
	saved := readProgress(h)
	if role == machineconfig.RoleInit {
		return saved.IsDone(stepBootstrapToken)
	}
	return saved.IsDone(stepWaitForAPI)
}

// saveProgress records step done, in the node state.
func saveProgress(h *Flow, p *nodestate.KubeadmProgress, step string) error {
	p.Done = append(p.Done, step)
	c := *p
	c.Done = append([]string(nil), p.Done...)
	return h.State.Update(func(j *nodestate.Journal) { j.Kubeadm = &c })
}

// checkKubeadmVersion makes sure, on a node whose steps run kubeadm (a
// control plane), that kubeadm is want, the version of the slot's bundle. A
// worker runs no kubeadm to join (its steps are in process) and skips
// the check: starting kubeadm costs a couple of CPU seconds, and a worker
// beside a busy init node gets a tenth of a core (docs/benchmarks.md).
func checkKubeadmVersion(ctx context.Context, h *Flow, cl *machineconfig.Cluster, want string) error {
	if !cl.IsControlPlane() {
		return nil
	}
	out, err := h.Output(ctx, "kubeadm", "version", "-o", "short")
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(out); got != want {
		return fmt.Errorf("kubeadm is %s but the slot's bundle carries Kubernetes %s: this image is inconsistent", got, want)
	}
	return nil
}

func applyKubernetes(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	cl := c.Cluster
	if cl == nil {
		return nil
	}
	h.Cluster(func(s *ClusterStatus) { s.Role = cl.Role })
	want, err := bundleKubernetesVersion(h.Host, h.KubernetesRoot())
	if err != nil {
		return err
	}
	if err := checkKubeadmVersion(ctx, h, cl, want); err != nil {
		return err
	}
	// From here containerd may unpack images (the pulls, the kubelet's
	// static pods): see pkg/node/images/unpackwindow.
	if err := unpackwindow.Open(h.Host); err != nil {
		return err
	}
	prog := loadProgress(h, NodeIdentity(c))
	one := func(ctx context.Context, st kubeadmStep) error { return doStep(ctx, h, c, prog, st) }
	ran := false
	for _, run := range stepRuns(steps(cl)) {
		var todo []kubeadmStep
		for _, st := range run {
			if !prog.IsDone(st.name) {
				todo = append(todo, st)
			}
		}
		if len(todo) == 0 {
			continue
		}
		ran = true
		all := func(ctx context.Context) error {
			for _, st := range todo {
				if err := one(ctx, st); err != nil {
					return err
				}
			}
			return nil
		}
		if !todo[0].oneAtATime {
			if err := all(ctx); err != nil {
				return err
			}
			continue
		}
		// A run of one-at-a-time steps goes under one hold of the join
		// lock.
		h.Cluster(func(s *ClusterStatus) { s.Step = todo[0].name })
		if err := withJoinLock(ctx, h, c, todo[0].name, all); err != nil {
			return err
		}
	}
	// Steps this call ran configured the node for this slot's
	// Kubernetes; a node whose steps were all done before (healed after
	// an OS upgrade) keeps the version it was configured for, which the
	// kubernetes-upgrade phase moves.
	if ran {
		if err := h.recordKubernetes(want); err != nil {
			return err
		}
	}
	h.Cluster(func(s *ClusterStatus) { s.Step = "joined" })
	if cl.Role == machineconfig.RoleInit {
		h.Cluster(func(s *ClusterStatus) { s.Step, s.AdminKubeconfig = "formed the cluster", AdminKubeconfig })
	}
	return nil
}

// doStep runs a step not done yet and records it done in prog.
func doStep(ctx context.Context, h *Flow, c *machineconfig.Config, prog *nodestate.KubeadmProgress, st kubeadmStep) error {
	h.Cluster(func(s *ClusterStatus) { s.Step = st.name })
	h.Report.Report(st.name, step.Started, "")
	if err := runStep(ctx, h, c, st); err != nil {
		return fmt.Errorf("%s: %w", st.name, err)
	}
	// What the step wrote, as docs/security.md says: kubeadm's 0644
	// files root's alone, etcd's certificates and data directory etcd's
	// before kubeadm writes its static pod (filemodes.go). Before the
	// step is recorded: a power cut in between runs both again.
	if err := tightenKubeadmFiles(h); err != nil {
		return fmt.Errorf("%s: %w", st.name, err)
	}
	// kubeadm does not sync what it writes: without this, a power
	// cut could keep the record of a step and lose its files.
	if err := h.Sync(ctx); err != nil {
		return err
	}
	if err := saveProgress(h, prog, st.name); err != nil {
		return err
	}
	h.Report.Report(st.name, step.Done, "")
	if st.name == stepBootstrapToken {
		h.admitFromFormation(ctx, c)
	}
	return nil
}

// AddonFieldManager is the field manager of the add-ons' objects: the
// fields a node's manifests set are Terrarium's. Clusters formed before
// it applied them with kubectl (manager "kubectl"); applying with
// force-conflicts moves those fields to this manager.
const AddonFieldManager = "terrarium"

// installAdminKubeconfig gives the admin user the admin kubeconfig (the
// control-plane components never use it: kubeadm gives each its own).
func installAdminKubeconfig(ctx context.Context, h *Flow, c *machineconfig.Config) error {
	name := nodephases.AdminName(c)
	if name == "" {
		return nil
	}
	b, err := os.ReadFile(h.Path(AdminKubeconfig))
	if err != nil {
		return err
	}
	dst := filepath.Join("/home", name, ".kube", "config")
	if _, err := h.WriteIfChanged(dst, b, 0o600); err != nil {
		return err
	}
	return h.Run(ctx, "chown", "-R", name+":"+name, filepath.Join("/home", name, ".kube"))
}

// initPhases are kubeadm init's phases, in the order its workflow runs
// them (cmd/kubeadm/app/cmd/init.go), and the control-plane phase's
// subphases.
var (
	initPhases = []string{"preflight", "certs", "kubeconfig", "etcd", "control-plane", "kubelet-start",
		"wait-control-plane", "upload-config", "upload-certs", "mark-control-plane", "bootstrap-token",
		"kubelet-finalize", "addon", "show-join-command"}
	controlPlaneSubphases = []string{"apiserver", "controller-manager", "scheduler"}
)

// The init phases the two steps after the API's readiness run, in one
// kubeadm process each (kubeadmInit). "control-plane/NAME" is one of its
// subphases.
var (
	initJoinablePhases = []string{"control-plane/controller-manager", "control-plane/scheduler",
		"upload-config", "mark-control-plane", "bootstrap-token"}
	initAddonPhases = []string{"kubelet-finalize", "addon"}
)

// kubeadmInit is a step that runs the init phases run, and only those, as
// one `kubeadm init` whose --skip-phases names every other phase: one
// process where `kubeadm init phase` takes one per phase.
func kubeadmInit(name string, run []string) kubeadmStep {
	wanted := map[string]bool{}
	for _, r := range run {
		wanted[r] = true
	}
	var skip []string
	for _, p := range initPhases {
		if wanted[p] {
			continue
		}
		if p != "control-plane" {
			skip = append(skip, p)
			continue
		}
		var subs []string
		for _, sub := range controlPlaneSubphases {
			if !wanted[p+"/"+sub] {
				subs = append(subs, p+"/"+sub)
			}
		}
		if len(subs) == len(controlPlaneSubphases) {
			subs = []string{p}
		}
		skip = append(skip, subs...)
	}
	return kubeadmStep{name: name, args: []string{"init", "--skip-phases=" + strings.Join(skip, ","), "--config=" + KubeadmConfigFile}}
}

// stepRuns splits steps into runs of consecutive steps alike in oneAtATime.
func stepRuns(steps []kubeadmStep) [][]kubeadmStep {
	var runs [][]kubeadmStep
	for i, st := range steps {
		if i == 0 || st.oneAtATime != steps[i-1].oneAtATime {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], st)
	}
	return runs
}

func oneAtATime(st kubeadmStep) kubeadmStep {
	st.oneAtATime = true
	return st
}

// runStep runs one step, up to h.Timing.StepAttempts times, with diagnostics on
// the console after each failure.
func runStep(ctx context.Context, h *Flow, c *machineconfig.Config, st kubeadmStep) error {
	var err error
	for attempt := 1; attempt <= h.Timing.StepAttempts; attempt++ {
		if st.own != nil {
			err = st.own(ctx, h, c)
		} else {
			_, err = h.Output(ctx, "kubeadm", st.args...)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		h.Report.Report(st.name, step.Retry, fmt.Sprintf("attempt %d of %d failed: %v", attempt, h.Timing.StepAttempts, err))
		h.Report.Report(st.name, step.Diagnostics, diagnostics(ctx, h))
		if attempt < h.Timing.StepAttempts {
			select {
			case <-ctx.Done():
			case <-time.After(h.Timing.StepRetry):
			}
		}
	}
	return err
}

// NodeIdentity keys the kubeadm progress: what defines the node in its
// cluster (the immutable fields), not the rendered kubeadm configuration,
// which a rotated token changes.
func NodeIdentity(c *machineconfig.Config) string {
	cl := c.Cluster
	sum := sha256.Sum256([]byte(strings.Join([]string{"node-identity-v1", cl.Name, cl.Role, cl.NodeIP, c.Hostname, cl.CACertHash}, "\x00")))
	return "identity:" + hex.EncodeToString(sum[:])
}

// kubeletCSRWindow is how long the init node watches for kubelets'
// certificate requests after its bootstrap-token step: the formation's
// first minutes, while its controller manager builds its controllers (it
// signs client certificates too, and every one after; AdmitNodes decides
// serving requests after).
const kubeletCSRWindow = 15 * time.Minute

// admitFromFormation starts, on the init node that has just made the
// cluster joinable, what approves and signs the kubelets' certificates
// (signKubeletCSRs, AdmitNodes) and labels the workers. It cannot start
// earlier: the admin may act only since upload-config, in the same step
// (kubeadm binds the admin's group to cluster-admin then). It must not
// start later: no joiner can have asked for a certificate before (the
// step makes the bootstrap token), so none waits; but with
// serverTLSBootstrap a kubelet serves nothing until its serving request
// is approved, and with --kubelet-certificate-authority the API server
// reaches no kubelet whose certificate the cluster CA did not sign: the
// init node's own kubelet, which asked once its Node registered, has no
// logs, exec or port-forward until the signer's first list, and a
// joiner's until the signer sees its request (at once while the signer
// watches, within admitEvery after). A firstboot that restarts after the
// step leaves this to AdmitNodes, which firstboot starts on every control
// plane once its phases are done.
func (h *Flow) admitFromFormation(ctx context.Context, c *machineconfig.Config) {
	h.signKubeletCSRs(ctx)
	go func() {
		_ = h.AdmitNodes(ctx, c) // its errors are its own to log
	}()
}

// signKubeletCSRs starts, on the init node that has just made the cluster
// joinable, the signer of kubelets' certificate requests (csrsigner),
// watching for them, for kubeletCSRWindow: a worker's kubelet waits tens
// of seconds for the controller manager to sign its client request
// (docs/benchmarks.md), and its serving request would wait for the next
// pass of AdmitNodes. The admin may make SubjectAccessReviews since
// upload-config. A node whose firstboot restarts after the step leaves
// client requests to the controller manager, and serving requests to
// AdmitNodes.
func (h *Flow) signKubeletCSRs(ctx context.Context) {
	if h.KubeletCSRs == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, kubeletCSRWindow)
		defer cancel()
		// Its errors are its own to log: the controller manager signs
		// the client requests it does not, AdmitNodes the serving ones.
		_ = h.KubeletCSRs(ctx, AdminKubeconfig, KubernetesPKIDir)
	}()
}
