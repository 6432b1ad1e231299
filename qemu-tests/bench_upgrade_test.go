//go:build e2e

package qemutests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// upgradeResult is one measured upgrade of a two-node cluster, written as
// JSON for scripts/bench-upgrade.sh. Times are seconds on the host's
// clock from the upgrade's start: the stick into the control plane
// (Terrarium), the operator's first command (kubeadm by hand).
type upgradeResult struct {
	Method string `json:"method"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Nodes in the order they were upgraded.
	Nodes []nodeUpgrade `json:"nodes"`
	// LastHealthy is when the last node was Ready on To and schedulable
	// again (and, for Terrarium, had blessed its boot).
	LastHealthy float64 `json:"lastHealthySeconds"`
	// Preparation (kubeadm by hand only) is what the operator did before
	// the clock started, which Terrarium's stick does within it: the new
	// images side-loaded and pulled and the new binaries put on each
	// node, in seconds.
	Preparation float64 `json:"preparationSeconds,omitempty"`
}

// nodeUpgrade is one node's upgrade: when its turn began to change it —
// its cordon, as the API showed it (upgradeWatch), or, for a Kubernetes
// run in place without a drain, the turn's first step in its journal —
// and when it was first Ready on the new version, uncordoned; and its
// steps, drawn as a timeline.
type nodeUpgrade struct {
	Name string `json:"name"`
	// Began is its cordon or, InPlace, its turn's start.
	Began   float64     `json:"beganSeconds"`
	InPlace bool        `json:"inPlace,omitempty"`
	Ready   float64     `json:"readySeconds"`
	Steps   []phaseMark `json:"steps"`
}

// upgradeBench is what both halves share: the builds, made once per
// bench (scripts/bench-upgrade.sh) into $TERRARIUM_BENCH_BUILDS, and
// where a run's results go, $TERRARIUM_BENCH_OUT.
type upgradeBench struct {
	oldK, newK string
	oldImage   string
	// upgrade is the good build's upgrade file; its rootfs holds the new
	// kubeadm, kubelet and kubectl the operator installs by hand.
	upgrade string
	out     string
}

func newUpgradeBench(ctx context.Context, t *testing.T) *upgradeBench {
	t.Helper()
	out := os.Getenv("TERRARIUM_BENCH_OUT")
	if out == "" {
		out = t.TempDir()
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	b := &upgradeBench{oldK: previousKubernetes(t), newK: kubernetesVersion(t), out: out}
	builds := os.Getenv("TERRARIUM_BENCH_BUILDS")
	if builds == "" {
		builds = filepath.Join(out, "builds")
	}
	require.NoError(t, os.MkdirAll(builds, 0o755))
	keyBase := filepath.Join(builds, "build")
	if _, err := os.Stat(keyBase + ".key"); err != nil {
		keyBase = upgradeKey(ctx, t, builds)
	}
	build := func(version, kube, components string) (string, string) {
		dir := filepath.Join(builds, version)
		image, file := filepath.Join(dir, "terrarium.qcow2"), filepath.Join(dir, "terrarium-"+version+".upgrade")
		if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
			return image, file // the other half's, or an earlier run's of this bench run
		}
		return buildClusterUpgrade(ctx, t, clusterUpgradeBuild{Repo: repo, Version: version, Kubernetes: kube,
			KubernetesComponents: components, Key: keyBase + ".key"}, dir)
	}
	b.oldImage, _ = build("0.1.0", b.oldK, "components/previous")
	_, b.upgrade = build("0.2.0", b.newK, "components")
	return b
}

// write saves r as METHOD.json in the bench's output and draws its
// timelines beside it.
func (b *upgradeBench) write(t *testing.T, r upgradeResult) {
	t.Helper()
	raw, err := json.MarshalIndent(r, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(b.out, r.Method+".json"), append(raw, '\n'), 0o644))
	// The figures, one a line, for the script's medians: each node's
	// cordon (or in-place start) → Ready, then the start → last node
	// healthy.
	var fig strings.Builder
	for _, n := range r.Nodes {
		fmt.Fprintf(&fig, "%s %.1f\n", n.Name, n.Ready-n.Began)
	}
	fmt.Fprintf(&fig, "last-healthy %.1f\n", r.LastHealthy)
	if r.Preparation > 0 {
		fmt.Fprintf(&fig, "preparation %.1f\n", r.Preparation)
		t.Logf("figure: %s preparation before the clock: %.0f s", r.Method, r.Preparation)
	}
	require.NoError(t, os.WriteFile(filepath.Join(b.out, r.Method+".figures"), []byte(fig.String()), 0o644))
	tl := upgradeTimeline(r)
	require.NoError(t, os.WriteFile(filepath.Join(b.out, r.Method+"-timeline.txt"), []byte(tl), 0o644))
	for _, n := range r.Nodes {
		began := "cordoned"
		if n.InPlace {
			began = "in place, from its turn"
		}
		t.Logf("figure: %s %s %s → Ready on %s: %.0f s", r.Method, n.Name, began, r.To, n.Ready-n.Began)
	}
	t.Logf("figure: %s start → last node healthy: %.0f s", r.Method, r.LastHealthy)
	t.Logf("timelines:\n%s", tl)
}

// upgradeTimeline draws each node's steps on one time axis from the
// upgrade's start to the last node healthy, with the node's cordon (or
// in-place start) and Ready marked.
func upgradeTimeline(r upgradeResult) string {
	a := timeAxis{width: 60, end: max(r.LastHealthy, 1)}
	var b strings.Builder
	for _, n := range r.Nodes {
		b.WriteString(a.header(r.Method + ": " + n.Name))
		a.steps(&b, n.Steps)
		for _, m := range []struct {
			name string
			at   float64
		}{{map[bool]string{false: "cordoned", true: "turn began, in place (no cordon)"}[n.InPlace], n.Began}, {"Ready on " + r.To + ", uncordoned", n.Ready}} {
			fmt.Fprintf(&b, "%-34s %*s\n", m.name, min(a.col(m.at), a.width-1)+1, "▲")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// upgradeWatch follows the cluster's Nodes through the API, as a person
// with kubectl would, the same way for both halves: every few seconds,
// through the control plane (logging in again while it reboots), when each
// node is first seen cordoned, and when first seen Ready on the new
// version and schedulable (a kubelet reports its version once restarted,
// which an upgrade does after its cordon, or in place without one).
type upgradeWatch struct {
	mu       sync.Mutex
	cordoned map[string]time.Time
	ready    map[string]time.Time
}

// watchUpgrade starts the watch; stop ends it and waits for it.
func watchUpgrade(ctx context.Context, t *testing.T, c *upgradeCluster, newK string) (w *upgradeWatch, stop func()) {
	w = &upgradeWatch{cordoned: map[string]time.Time{}, ready: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	stop = func() { cancel(); <-done }
	// Bounded at every level: an API that restarts mid-request, or a
	// connection left half-open by the control plane's reboot, costs one
	// look, not the figure.
	query := `kubectl --request-timeout=15s get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.unschedulable} {.status.nodeInfo.kubeletVersion} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'`
	line := regexp.MustCompile(`(?m)^(\S+) (true)? ?(v\S+) (True|False|Unknown)$`)
	go func() {
		defer close(done)
		var ssh *sshClient
		defer func() {
			if ssh != nil {
				_ = ssh.c.Close()
			}
		}()
		for ctx.Err() == nil {
			if ssh == nil {
				dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				ssh, _ = trySSH(dialCtx, t, c.cp.sshPort, c.key)
				cancel()
			}
			if ssh != nil {
				out, err := readWithin(ssh, query, 45*time.Second)
				if err != nil && !strings.Contains(out, " v") {
					// kubectl's own failure (the API restarting) keeps
					// the session; a dead one is dialled again.
					if _, e := readWithin(ssh, "true", 20*time.Second); e != nil {
						_ = ssh.c.Close()
						ssh = nil
					}
				}
				now := time.Now()
				w.mu.Lock()
				for _, m := range line.FindAllStringSubmatch(out, -1) {
					name, cordoned, version, ready := m[1], m[2] == "true", m[3], m[4] == "True"
					if _, seen := w.cordoned[name]; cordoned && !seen {
						w.cordoned[name] = now
					}
					if !cordoned && ready && version == newK {
						if _, done := w.ready[name]; !done {
							w.ready[name] = now
						}
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Second):
			}
		}
	}()
	return w, stop
}

// readWithin is s.read bounded by d: past it, the connection is closed,
// which ends the read.
func readWithin(s *sshClient, cmd string, d time.Duration) (string, error) {
	timer := time.AfterFunc(d, func() { _ = s.c.Close() })
	defer timer.Stop()
	return s.read(cmd)
}

// wait waits until node is Ready on the new version, and returns when
// it was seen cordoned (zero: never) and then Ready.
func (w *upgradeWatch) wait(ctx context.Context, node string) (cordoned, ready time.Time, err error) {
	for {
		w.mu.Lock()
		cordoned, ready = w.cordoned[node], w.ready[node]
		w.mu.Unlock()
		if !ready.IsZero() {
			return cordoned, ready, nil
		}
		select {
		case <-ctx.Done():
			return cordoned, ready, fmt.Errorf("%s: not seen Ready on the new version (cordoned: %v): %w", node, !cordoned.IsZero(), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// TestUpgradeBenchTerrarium: a cluster formed on 0.1.0 (the previous
// Kubernetes) takes 0.2.0 from one stick in its control plane; nothing
// else is done by hand. 0.2.0 changes nothing but Kubernetes, so each node
// runs it in place (package inplace), without a drain or a reboot; a
// node that reboots instead is measured from its cordon.
func TestUpgradeBenchTerrarium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Minute)
	defer cancel()
	b := newUpgradeBench(ctx, t)
	work := t.TempDir()
	stick := upgradeStick(ctx, t, "TERRA-UPGRADE", b.upgrade, filepath.Join(work, "good.img"))
	c := formUpgradeCluster(ctx, t, work, b.oldImage, "bench-upgrade", b.oldK)

	const step = 40 * time.Minute // a trial boot with kubeadm upgrade apply under TCG
	start := time.Now()
	watch, stopWatch := watchUpgrade(ctx, t, c, b.newK)
	defer stopWatch()
	require.NoError(t, c.cp.vm.HotplugDisk(ctx, qemu.Disk{ID: "good", Path: stick, Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}))
	done := map[string]time.Time{}
	for _, n := range []*clusterNode{c.cp, c.w} {
		expectWithin(ctx, t, n.vm, step, `rollout: this node is done`)
		done[n.name] = time.Now()
		if n == c.cp {
			require.NoError(t, c.cp.vm.UnplugDisk(ctx, "good"))
		}
	}
	r := upgradeResult{Method: "terrarium", From: b.oldK, To: b.newK}
	for _, n := range []*clusterNode{c.cp, c.w} {
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		cordoned, ready, err := watch.wait(waitCtx, n.name)
		cancel()
		require.NoError(t, err)
		ssh := dialSSH(ctx, t, n.sshPort, c.key)
		// The journal's times are the guest's wall clock, which follows
		// its RTC within seconds of the host's: taken back to the host's.
		g, err := readGuestTime(ctx, ssh, start)
		require.NoError(t, err, "%s: its clock", n.name)
		j := journalOf(t, ssh)
		raw, err := json.MarshalIndent(j, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(b.out, "journal-"+n.name+".json"), append(raw, '\n'), 0o644))
		steps := upgradeSteps(j, start.Add(g.offset))
		nu := nodeUpgrade{Name: n.name, Began: cordoned.Sub(start).Seconds(), Ready: ready.Sub(start).Seconds(), Steps: steps}
		if cordoned.IsZero() {
			nu.InPlace = true
			nu.Began = stepEnd(steps, rollouts.StepName+": "+rollout.NodeInPlace)
			require.Positive(t, nu.Began, "%s: never cordoned, and its journal has no in-place turn", n.name)
		}
		r.Nodes = append(r.Nodes, nu)
		r.LastHealthy = max(r.LastHealthy, ready.Sub(start).Seconds(), done[n.name].Sub(start).Seconds())
	}
	b.write(t, r)
}

// stepEnd is when the first step named name ended (0: none).
func stepEnd(steps []phaseMark, name string) float64 {
	for _, s := range steps {
		if s.Name == name {
			return s.End
		}
	}
	return 0
}

// TestUpgradeBenchKubeadm is the baseline: the same cluster on the same
// image, upgraded to the same Kubernetes by hand as kubeadm's guide says —
// drain, `kubeadm upgrade apply` (the control plane) or `kubeadm upgrade
// node` (the worker), the new kubelet and kubectl in place of the old,
// the kubelet restarted, uncordon — one node after the other, with
// Terrarium's own UpgradeConfiguration (its patches, its timeouts).
// Before the clock starts (the "images preloaded in both"), the
// new images are where the nodes pull from (a signed TERRA-BUNDLE stick of
// the new Kubernetes bundle) and pulled, and the new binaries, taken from
// the upgrade file's root filesystem, are on each node; the slot being
// read-only, they are bind-mounted over the old ones. Terrarium's stick
// does all of that within its clock: the preparation is its own figure.
func TestUpgradeBenchKubeadm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	b := newUpgradeBench(ctx, t)
	work := t.TempDir()
	bins := newKubernetesBinaries(ctx, t, b.upgrade, work)
	c := formUpgradeCluster(ctx, t, work, b.oldImage, "bench-upgrade", b.oldK)

	// The new images, side-loaded and pulled on each node (the stick is
	// made before, as Terrarium's upgrade stick is).
	bundle := filepath.Join(work, "bundle.img")
	out, err := exec.CommandContext(ctx, filepath.Join(fixture(t, "TERRARIUM_BIN"), "imagebuild"), "bundle", "disk",
		"../bundles/kubernetes-"+b.newK+".yaml", "--sign", filepath.Join(c.configs, "secrets.yaml"), "-o", bundle).CombinedOutput()
	require.NoError(t, err, "imagebuild bundle disk: %s", out)
	prepared := time.Now()
	shells := map[string]*sshClient{}
	for _, n := range []*clusterNode{c.cp, c.w} {
		require.NoError(t, n.vm.HotplugDisk(ctx, qemu.Disk{ID: "bundle", Path: bundle, Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}))
		expectWithin(ctx, t, n.vm, 10*time.Minute, `bundle disk \S+ added \d+ images to the cache`)
		require.NoError(t, n.vm.UnplugDisk(ctx, "bundle"))
		ssh := dialSSH(ctx, t, n.sshPort, c.key)
		shells[n.name] = ssh
		for _, name := range []string{"kubeadm", "kubelet", "kubectl"} {
			ssh.put(filepath.Join(bins, name), "/tmp/"+name)
		}
		cp := n == c.cp
		cfg, err := kubeadmconfig.RenderUpgrade(kubeadmconfig.UpgradeInput{KubernetesVersion: b.newK, ControlPlane: cp,
			IgnorePreflightErrors: []string{"SystemVerification", "CRI", "ContainerRuntimeVersion", "CreateJob"}}) // kubeadmflow's upgradeIgnoredChecks
		require.NoError(t, err)
		ssh.run("cat > /tmp/kubeadm-upgrade.yaml <<'EOF'\n" + string(cfg) + "EOF\n")
		installed, err := ssh.sudoTry("install -d -m 0700 /var/lib/bench-upgrade && install -m 0755 /tmp/kubeadm /tmp/kubelet /tmp/kubectl /var/lib/bench-upgrade/ && " +
			"rm /tmp/kubeadm /tmp/kubelet /tmp/kubectl")
		require.NoError(t, err, "%s: the new binaries: %s", n.name, installed)
		// Through the CRI, as kubeadm pulls (the image has no crictl).
		pulled, err := ssh.sudoTry("/var/lib/bench-upgrade/kubeadm config images pull --kubernetes-version " + b.newK +
			" --cri-socket unix:///run/containerd/containerd.sock")
		require.NoError(t, err, "%s: kubeadm config images pull: %s", n.name, pulled)
	}
	r := upgradeResult{Method: "kubeadm", From: b.oldK, To: b.newK, Preparation: time.Since(prepared).Seconds()}
	t.Logf("the new images pulled on both nodes, the new binaries on both")

	// The operator's clock starts at the first drain.
	start := time.Now()
	watch, stopWatch := watchUpgrade(ctx, t, c, b.newK)
	defer stopWatch()
	admin := shells[c.cp.name]
	for _, n := range []*clusterNode{c.cp, c.w} {
		ssh := shells[n.name]
		var steps []phaseMark
		if n != c.cp {
			// Its turn starts when the node before it is done.
			steps = append(steps, phaseMark{Name: "waiting for its turn", End: time.Since(start).Seconds()})
		}
		do := func(name string, on *sshClient, cmd string) {
			t.Helper()
			out, err := on.sudoTry(cmd)
			require.NoError(t, err, "%s: %s: %s\n%s", n.name, name, cmd, out)
			steps = append(steps, phaseMark{Name: name, End: time.Since(start).Seconds()})
		}
		upgrade := "kubeadm upgrade node --config /tmp/kubeadm-upgrade.yaml"
		if n == c.cp {
			upgrade = "kubeadm upgrade apply --config /tmp/kubeadm-upgrade.yaml --yes"
		}
		do("kubectl drain", admin, "kubectl --kubeconfig /etc/kubernetes/admin.conf drain "+n.name+" --ignore-daemonsets --delete-emptydir-data --timeout=30m")
		do(strings.Join(strings.Fields(upgrade)[:3], " "), ssh, "mount --bind /var/lib/bench-upgrade/kubeadm /usr/bin/kubeadm && "+upgrade)
		do("new kubelet and kubectl, restarted", ssh, "mount --bind /var/lib/bench-upgrade/kubelet /usr/bin/kubelet && "+
			"mount --bind /var/lib/bench-upgrade/kubectl /usr/bin/kubectl && systemctl daemon-reload && systemctl restart kubelet")
		do("kubectl uncordon", admin, "kubectl --kubeconfig /etc/kubernetes/admin.conf uncordon "+n.name)
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Minute)
		cordoned, ready, err := watch.wait(waitCtx, n.name)
		cancel()
		require.NoError(t, err)
		steps = append(steps, phaseMark{Name: "Ready on " + b.newK, End: ready.Sub(start).Seconds()})
		r.Nodes = append(r.Nodes, nodeUpgrade{Name: n.name, Began: cordoned.Sub(start).Seconds(),
			Ready: ready.Sub(start).Seconds(), Steps: steps})
		r.LastHealthy = max(r.LastHealthy, ready.Sub(start).Seconds())
	}
	server := admin.output("kubectl get --raw /version", regexp.MustCompile(`"gitVersion"`))
	require.Contains(t, server, `"gitVersion": "`+b.newK+`"`, "the API server after kubeadm upgrade apply")
	b.write(t, r)
}

// newKubernetesBinaries unpacks the new kubeadm, kubelet and kubectl from
// an upgrade file's root filesystem into dir and returns where they are.
func newKubernetesBinaries(ctx context.Context, t *testing.T, upgradeFile, dir string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "tar", "-xf", upgradeFile, "-C", dir, "rootfs.squashfs").CombinedOutput()
	require.NoError(t, err, "tar -xf %s rootfs.squashfs: %s", upgradeFile, out)
	root := filepath.Join(dir, "rootfs")
	out, err = exec.CommandContext(ctx, "unsquashfs", "-no-progress", "-d", root, filepath.Join(dir, "rootfs.squashfs"),
		"usr/bin/kubeadm", "usr/bin/kubelet", "usr/bin/kubectl").CombinedOutput()
	require.NoError(t, err, "unsquashfs: %s", out)
	require.NoError(t, os.Remove(filepath.Join(dir, "rootfs.squashfs")))
	bins := filepath.Join(root, "usr", "bin")
	names, err := os.ReadDir(bins)
	require.NoError(t, err)
	require.Len(t, names, 3, "kubeadm, kubelet and kubectl in the upgrade's root filesystem")
	return bins
}

// put copies the local file src to path on the guest, as the admin user.
func (s *sshClient) put(src, path string) {
	s.t.Helper()
	f, err := os.Open(src)
	require.NoError(s.t, err)
	defer f.Close()
	sess, err := s.c.NewSession()
	require.NoError(s.t, err)
	defer sess.Close()
	sess.Stdin = io.Reader(f)
	out, err := sess.CombinedOutput("cat > " + path)
	require.NoError(s.t, err, "copy %s to the guest's %s: %s", src, path, out)
}

// upgradeSteps are a node's steps in its journal from start on, each
// named with what it came to ("upgrade: staged"), which tells apart the
// many steps an upgrade and a rollout record under one name. A step's
// progress reports ("rootfs 40%") and its waits are one bar with the
// result that ends it.
func upgradeSteps(j nodestate.Journal, start time.Time) []phaseMark {
	var steps []phaseMark
	for _, b := range j.Boots {
		for _, s := range b.Steps {
			end := s.At.Sub(start).Seconds()
			if end <= 0 || strings.HasPrefix(s.Name, "power-on") {
				continue
			}
			switch s.Result {
			case "started", "waiting", "lock", "diagnostics", "progress", "pulled", "present":
				continue
			}
			m := phaseMark{Name: s.Name + ": " + string(s.Result), End: end}
			if s.Result == "retry" || s.Result == "failed" || s.Result == "refused" {
				m.Detail = s.Detail
			}
			if n := len(steps); n > 0 && steps[n-1].Name == m.Name && m.Detail == "" {
				steps[n-1].End = end
				continue
			}
			steps = append(steps, m)
		}
	}
	return steps
}
