//go:build e2e

package qemutests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// clusterUpgradeBuild is one build of testdata/cluster-upgrade.yaml.tmpl.
type clusterUpgradeBuild struct {
	Repo, Version, Faults, Kubernetes, KubernetesComponents, Key string
}

// buildClusterUpgrade builds b into out and returns the paths of its
// qcow2 image and its upgrade file.
func buildClusterUpgrade(ctx context.Context, t *testing.T, b clusterUpgradeBuild, out string) (image, upgradeFile string) {
	t.Helper()
	tmpl, err := template.ParseFiles("testdata/cluster-upgrade.yaml.tmpl")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(out, 0o755))
	spec := filepath.Join(out, "spec.yaml")
	f, err := os.Create(spec)
	require.NoError(t, err)
	require.NoError(t, tmpl.Execute(f, b))
	require.NoError(t, f.Close())
	start := time.Now()
	buildSpec(ctx, t, spec, out)
	t.Logf("built %s (Kubernetes %s, faults [%s]) in %s", b.Version, b.Kubernetes, b.Faults, time.Since(start).Round(time.Second))
	return filepath.Join(out, "terrarium.qcow2"), filepath.Join(out, "terrarium-"+b.Version+".upgrade")
}

// previousKubernetes is the release components/previous pins.
func previousKubernetes(t *testing.T) string {
	b, err := os.ReadFile("../components/previous/versions.yaml")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^kubernetes:\s*(\S+)`).FindSubmatch(b)
	require.NotNil(t, m, "components/previous/versions.yaml names no kubernetes version")
	return string(m[1])
}

// availability probes a service on every node from the host, each round
// every node at once, and counts the rounds in which none answered.
type availability struct {
	mu              sync.Mutex
	rounds, outages int
	longest, run    int
	lastOutage      string
}

func (a *availability) watch(ctx context.Context, urls []string, every time.Duration) {
	client := &http.Client{Timeout: 4 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		// A replica that answers within a round counts: each is asked up
		// to three times (an emulated node under load answers late, not
		// never).
		answered := make(chan bool, len(urls))
		for _, u := range urls {
			go func(u string) {
				for try := 0; try < 3; try++ {
					if resp, err := client.Get(u); err == nil {
						b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
						_ = resp.Body.Close() // read as far as it tells
						if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "echo" {
							answered <- true
							return
						}
					}
				}
				answered <- false
			}(u)
		}
		up := false
		for range urls {
			up = <-answered || up
		}
		a.mu.Lock()
		a.rounds++
		if up {
			a.run = 0
		} else {
			a.outages++
			a.run++
			a.longest = max(a.longest, a.run)
			a.lastOutage = time.Now().Format(time.TimeOnly)
		}
		a.mu.Unlock()
	}
}

func (a *availability) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := fmt.Sprintf("%d probe rounds, %d with no replica answering", a.rounds, a.outages)
	if a.outages > 0 {
		s += fmt.Sprintf(" (longest run %d, last at %s)", a.longest, a.lastOutage)
	}
	return s
}

// journalOf reads a node's journal over SSH.
func journalOf(t *testing.T, ssh *sshClient) nodestate.Journal {
	t.Helper()
	// Copied out by sudo, then read without sudo's pty (which now and then
	// cuts a long output short).
	ssh.run("sudo install -m 0644 /state/terrarium/journal.json /tmp/journal.json")
	raw, err := ssh.read("cat /tmp/journal.json")
	require.NoError(t, err)
	i := strings.Index(raw, "{")
	require.GreaterOrEqual(t, i, 0, "journal: %q", raw)
	var j nodestate.Journal
	require.NoError(t, json.Unmarshal([]byte(raw[i:]), &j))
	return j
}

// addonEntry is who applied an add-on, as the cluster's add-ons record
// (kube-system/terrarium-addons) says.
type addonEntry struct {
	Release string `json:"release"`
	Node    string `json:"node"`
}

// addonsRecordOf reads the add-ons record's entry for addon.
func addonsRecordOf(t *testing.T, ssh *sshClient, addon string) addonEntry {
	t.Helper()
	out := ssh.output("kubectl -n kube-system get configmap "+kubeadmflow.AddonsRecordName+" -o jsonpath='{.data."+addon+"}'", regexp.MustCompile(`"release"`))
	var e addonEntry
	i := strings.Index(out, "{")
	if i < 0 || json.Unmarshal([]byte(strings.TrimSpace(out[i:])), &e) != nil {
		t.Errorf("the add-ons record's %s: %q", addon, out)
	}
	return e
}

// stepAt is when the journal last recorded step with result.
func stepAt(j nodestate.Journal, step, result string) time.Time {
	var at time.Time
	for _, b := range j.Boots {
		for _, s := range b.Steps {
			if s.Name == step && string(s.Result) == result && s.At.After(at) {
				at = s.At
			}
		}
	}
	return at
}

// TestClusterUpgrade: one stick upgrades a two-node cluster (a control
// plane and a worker) formed on the Kubernetes release before the
// default's, built from source (components/previous), to the default's,
// node by node, while a two-replica Deployment under a
// PodDisruptionBudget keeps answering. First a build whose new slot fails
// its health check: the control plane, which ran kubeadm upgrade apply on
// its trial, falls back, puts the cluster's kubeadm objects back, marks the
// upgrade bad for the cluster and stops the rollout; the worker never
// installs it, and the cluster stays on the old release, healthy. Then the
// good build: both nodes upgrade, control plane first, and end Ready on
// the new release.
func TestClusterUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Minute)
	defer cancel()
	bin := fixture(t, "TERRARIUM_BIN")
	work := t.TempDir()
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	keyBase := filepath.Join(work, "build")
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "config", "keygen", "-o", keyBase).CombinedOutput()
	require.NoError(t, err, "keygen: %s", out)
	oldK, newK := previousKubernetes(t), kubernetesVersion(t)
	require.FileExists(t, filepath.Join(repo, "bundles", "kubernetes-"+oldK+".yaml"), "the previous release's bundle: run make pin-previous")
	gomod, err := os.ReadFile(filepath.Join(repo, "components", "previous", "kubernetes", "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "k8s.io/kubernetes "+oldK, "components/previous is not pinned to %s: run make pin-previous", oldK)

	// The cluster's image, the faulty upgrade, the good one.
	oldImage, _ := buildClusterUpgrade(ctx, t, clusterUpgradeBuild{Repo: repo, Version: "0.1.0", Kubernetes: oldK,
		KubernetesComponents: "components/previous", Key: keyBase + ".key"}, filepath.Join(work, "0.1.0"))
	_, faulty := buildClusterUpgrade(ctx, t, clusterUpgradeBuild{Repo: repo, Version: "0.1.1", Kubernetes: newK, Faults: "health",
		KubernetesComponents: "components", Key: keyBase + ".key"}, filepath.Join(work, "0.1.1"))
	_, good := buildClusterUpgrade(ctx, t, clusterUpgradeBuild{Repo: repo, Version: "0.2.0", Kubernetes: newK,
		KubernetesComponents: "components", Key: keyBase + ".key"}, filepath.Join(work, "0.2.0"))
	sticks := map[string]string{
		"faulty": upgradeStick(ctx, t, "TERRA-UPGRADE", faulty, filepath.Join(work, "faulty.img")),
		"good":   upgradeStick(ctx, t, "TERRA-UPGRADE", good, filepath.Join(work, "good.img")),
	}

	c := formUpgradeCluster(ctx, t, work, oldImage, "e2e-upgrade", oldK)
	cp, w, key, ssh := c.cp, c.w, c.key, c.ssh
	// A StatefulSet's volume on the worker, carried through both
	// upgrades (its drain and its reboots onto each slot).
	volume, haveVolume := checkLocalStorage(t, ssh, dialSSH(ctx, t, w.sshPort, key), w.name, "")
	t.Logf("workload:\n%s", ssh.run("kubectl get pods -A -o wide"))
	probeCtx, stopProbe := context.WithCancel(ctx)
	var avail availability
	probed := make(chan struct{})
	go func() { defer close(probed); avail.watch(probeCtx, c.echoURLs, 2*time.Second) }()
	defer func() { stopProbe(); <-probed }()

	const step = 40 * time.Minute // a trial boot with kubeadm upgrade apply under TCG
	plug := func(id string) {
		t.Helper()
		require.NoError(t, cp.vm.HotplugDisk(ctx, qemu.Disk{ID: id, Path: sticks[id], Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}))
	}

	// As in a cluster formed before the add-ons' record, which an upgrade
	// gives every add-on once (docs/cluster.md): the control plane's
	// trial slot applies them and records its release.
	ssh.run("kubectl -n kube-system delete configmap " + kubeadmflow.AddonsRecordName)

	// 1. The faulty upgrade: the control plane's trial fails; it falls
	// back and the cluster stays on the old release.
	began := time.Now()
	plug("faulty")
	expectWithin(ctx, t, cp.vm, step, `upgrade: 0\.1\.1 is rolling out to the cluster's 2 nodes`)
	expectWithin(ctx, t, cp.vm, step, `Terrarium 0\.1\.1, slot b`)
	expectWithin(ctx, t, cp.vm, step, `kubernetes upgrade: done: from `+regexp.QuoteMeta(oldK)+` to `+regexp.QuoteMeta(newK))
	rolled := expectWithin(ctx, t, cp.vm, step, `upgrade to 0\.1\.1 rolled back: ([^;\n]*)`)
	t.Logf("cp-1: 0.1.1 rolled back %s after the stick: %s", time.Since(began).Round(time.Second), rolled[1])
	expectWithin(ctx, t, cp.vm, step, `kubernetes upgrade: restored: the cluster's kubeadm objects to `+regexp.QuoteMeta(oldK))
	expectWithin(ctx, t, cp.vm, step, `rollout: this node is rolled-back`)
	require.NoError(t, cp.vm.UnplugDisk(ctx, "faulty"))
	ssh = dialSSH(ctx, t, cp.sshPort, key)
	// cp-1 reported its rollback in its own status object and marks the
	// upgrade bad in the cluster's record at its next look (every 5 s).
	var status string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Second) {
		status = ssh.output("sudo firstboot upgrade status", regexp.MustCompile(`(?m)^bad\s`))
		if regexp.MustCompile(`(?m)^bad\s`).MatchString(status) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after the faulty upgrade:\n%s", status)
	assert.Contains(t, status, "0.1.1 (Kubernetes "+newK+"), started by cp-1")
	assert.Regexp(t, `bad\s+0\.1\.1 rolled back on cp-1`, status)
	nodes := ssh.output("kubectl get nodes", regexp.MustCompile(`(?s)cp-1\s+Ready\s.*w-1\s+Ready\s`))
	assert.Equal(t, 2, strings.Count(nodes, oldK), "both nodes on %s:\n%s", oldK, nodes)
	proxy := ssh.output("kubectl -n kube-system get daemonset kube-proxy -o jsonpath='{.spec.template.spec.containers[0].image}'",
		regexp.MustCompile(`kube-proxy:v`))
	assert.Equal(t, "registry.k8s.io/kube-proxy:"+oldK, strings.TrimSpace(proxy), "kube-proxy back on the old release")
	assert.NotContains(t, w.vm.Console(), "rollout: upgrading this node", "the worker never installed the faulty upgrade")
	// The trial slot applied the add-ons; its fallback, whose add-ons
	// render the same, leaves them. A boot of the old slot before the
	// trial (a reboot in the middle of the install: a guest kernel panic
	// under TCG did it once) applies them first, the same way, and the
	// trial then leaves them too.
	con := cp.vm.Console()
	trial := strings.Index(con, "Terrarium 0.1.1, slot b")
	fallback := strings.LastIndex(con, "Terrarium 0.1.0, slot a")
	require.True(t, trial >= 0 && fallback > trial, "cp-1 booted the trial, then fell back")
	assert.NotContains(t, con[fallback:], "add-on pod-network: done", "the fallback leaves the add-ons")
	assert.Equal(t, 1, strings.Count(con, "add-on pod-network: done"), "the pod network applied once")
	applied := "0.1.1"
	if strings.Contains(con[:trial], "add-on pod-network: done") {
		applied = "0.1.0"
	}
	assert.Equal(t, addonEntry{Release: applied, Node: "cp-1"}, addonsRecordOf(t, ssh, "pod-network"))
	ssh.run("kubectl -n kube-system delete configmap " + kubeadmflow.AddonsRecordName)
	t.Logf("availability so far: %s", &avail)

	// 2. The good upgrade: control plane first, then the worker. It
	// changes nothing but Kubernetes, so each node runs it in place, from
	// the slot it wrote, without a drain or a reboot (package inplace).
	began = time.Now()
	before := map[string]int{cp.name: len(cp.vm.Console()), w.name: len(w.vm.Console())}
	plug("good")
	inPlace := `only Kubernetes changes: kubelet, kubeadm, kubectl, the bundle's images, so this node runs it in place, without a drain or a reboot`
	expectWithin(ctx, t, cp.vm, step, `upgrade: 0\.2\.0 is rolling out to the cluster's 2 nodes`)
	expectWithin(ctx, t, cp.vm, step, inPlace)
	expectWithin(ctx, t, cp.vm, step, `kubernetes upgrade: done: from `+regexp.QuoteMeta(oldK)+` to `+regexp.QuoteMeta(newK))
	expectWithin(ctx, t, cp.vm, step, `rollout: this node is done \(runs 0\.2\.0's Kubernetes in place; slot b boots it at the next reboot\)`)
	t.Logf("cp-1: on %s %s after the stick", newK, time.Since(began).Round(time.Second))
	require.NoError(t, cp.vm.UnplugDisk(ctx, "good"))
	expectWithin(ctx, t, w.vm, step, `rollout: fetching 0\.2\.0 from the cluster's registries`)
	expectWithin(ctx, t, w.vm, step, inPlace)
	expectWithin(ctx, t, w.vm, step, `rollout: this node is done \(runs 0\.2\.0's Kubernetes in place`)
	t.Logf("w-1: on %s %s after the stick", newK, time.Since(began).Round(time.Second))
	for _, n := range []*clusterNode{cp, w} {
		con := n.vm.Console()
		assert.NotContains(t, con[before[n.name]:], "drained", "%s: never drained", n.name)
		assert.NotContains(t, con, "Terrarium 0.2.0, slot b", "%s: not rebooted", n.name)
	}

	ssh = dialSSH(ctx, t, cp.sshPort, key)
	// The worker reports done in its own status object; cp-1 records it
	// in the cluster's record at its next look (every 5 s).
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Second) {
		status = ssh.output("sudo firstboot upgrade status", regexp.MustCompile(`nodes done`))
		if strings.Contains(status, "2 of 2 nodes done") || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after the good upgrade:\n%s", status)
	assert.Contains(t, status, "0.2.0 (Kubernetes "+newK+"), started by cp-1 at")
	assert.Contains(t, status, "2 of 2 nodes done")
	// Both Ready on the new release (the worker's kubelet reports it a
	// little after its boot is blessed).
	both := regexp.MustCompile(`cp-1\s+Ready\s[^\n]*` + regexp.QuoteMeta(newK) + `(?s:.*)w-1\s+Ready\s[^\n]*` + regexp.QuoteMeta(newK))
	deadline := time.Now().Add(10 * time.Minute)
	for nodes = ssh.run("kubectl get nodes"); !both.MatchString(nodes) && time.Now().Before(deadline); nodes = ssh.run("kubectl get nodes") {
		time.Sleep(10 * time.Second)
	}
	t.Logf("nodes:\n%s", nodes)
	assert.Equal(t, 2, strings.Count(nodes, newK), "both nodes Ready on %s", newK)
	assert.NotContains(t, nodes, "SchedulingDisabled", "both uncordoned")
	server := ssh.output("kubectl get --raw /version", regexp.MustCompile(`"gitVersion"`))
	assert.Contains(t, server, `"gitVersion": "`+newK+`"`)
	ssh.run("kubectl -n echo rollout status --timeout=15m deployment/echo")
	assert.Equal(t, addonEntry{Release: "0.2.0", Node: "cp-1"}, addonsRecordOf(t, ssh, "pod-network"), "the new release's control plane applied the add-ons")
	if haveVolume {
		checkLocalVolumeKept(t, ssh, dialSSH(ctx, t, w.sshPort, key), w.name, volume, "the OS upgrade of both nodes")
	}

	// One at a time: the worker installed only after the control plane
	// was done (their clocks follow the control plane's).
	cpJournal := journalOf(t, ssh)
	wJournal := journalOf(t, dialSSH(ctx, t, w.sshPort, key))
	cpDone, wInstalled := stepAt(cpJournal, "rollout", "done"), stepAt(wJournal, "upgrade", "installed")
	require.False(t, cpDone.IsZero(), "cp-1 recorded its turn done")
	require.False(t, wInstalled.IsZero(), "w-1 recorded its install")
	assert.True(t, wInstalled.After(cpDone), "w-1 installed at %s, after cp-1 was done at %s", wInstalled, cpDone)

	// Figures (the guests' clocks, which follow cp-1's; the host's for
	// the stick): per node, cordon (its drain's start) to its turn done
	// (healthy and blessed on the new release), both from its journal
	// (not the Node's Ready condition: a single control plane's never
	// changes, as nobody marks it NotReady while its API is down, so its
	// transition time is formation's); the cluster, the stick to the last
	// node done; the upgrade file's size.
	g, err := readGuestTime(ctx, ssh, began)
	require.NoError(t, err)
	t.Logf("cp-1's wall clock %+.1f s from the host's", g.offset.Seconds())
	wDone := stepAt(wJournal, "rollout", "done")
	for _, n := range []struct {
		name string
		j    nodestate.Journal
		done time.Time
	}{{"cp-1", cpJournal, cpDone}, {"w-1", wJournal, wDone}} {
		turn := stepAt(n.j, "rollout", "in-place")
		if assert.False(t, turn.IsZero() || n.done.IsZero(), "%s recorded its in-place turn and its turn done", n.name) {
			t.Logf("figure: %s in place → healthy on %s: %s", n.name, newK, n.done.Sub(turn).Round(time.Second))
		}
	}
	t.Logf("figure: stick in cp-1 → last node done: %s", wDone.Add(-g.offset).Sub(began).Round(time.Second))
	for name, p := range map[string]string{"upgrade file": good, "qcow2": filepath.Join(work, "0.2.0", "terrarium.qcow2")} {
		if fi, err := os.Stat(p); err == nil {
			t.Logf("figure: %s %d MiB", name, fi.Size()>>20)
		}
	}

	stopProbe()
	<-probed
	t.Logf("availability of the two-replica Deployment: %s", &avail)
	avail.mu.Lock()
	assert.Zero(t, avail.outages, "at least one replica answered throughout")
	assert.Greater(t, avail.rounds, 100)
	avail.mu.Unlock()
	// 3. The next reboot of each node (after the availability's figure:
	// a reboot without a drain is not an upgrade's) boots slot b on
	// trial: nothing left to move, its boot blessed and the upgrade kept.
	for _, n := range []*clusterNode{cp, w} {
		_, _ = dialSSH(ctx, t, n.sshPort, key).sudoTry("systemctl reboot") // the session ends with the guest
		expectWithin(ctx, t, n.vm, step, `Terrarium 0\.2\.0, slot b`)
		expectWithin(ctx, t, n.vm, step, `upgraded from 0\.1\.0 to 0\.2\.0: slot b is healthy and blessed`)
		t.Logf("%s: rebooted into slot b and blessed", n.name)
	}
	ssh = dialSSH(ctx, t, cp.sshPort, key)
	nodes = ssh.output("kubectl get nodes", both)
	assert.Equal(t, 2, strings.Count(nodes, newK), "both nodes Ready on %s after the reboots:\n%s", newK, nodes)

	for _, n := range []*clusterNode{cp, w} {
		require.NoError(t, n.vm.Quit(ctx))
	}
	t.Logf("cluster link capture: %d packets, all inside %s", checkCapture(t, c.capture, clusterSubnet), clusterSubnet)
}

// upgradeCluster is a two-node cluster (a control plane and a worker)
// formed for an upgrade, with its workload: a two-replica Deployment, one
// replica per node behind a host port forwarded from the host (echoURLs),
// and a PodDisruptionBudget of one.
type upgradeCluster struct {
	cp, w    *clusterNode
	key      sshKey
	configs  string
	ssh      *sshClient // on cp
	capture  string     // the cluster link's
	echoURLs []string
}

// formUpgradeCluster forms a cluster named name from image, whose
// Kubernetes is kube, in work, on QEMU's instruction clock, and applies
// the workload. The guests' clocks follow their RTC until the test ends.
func formUpgradeCluster(ctx context.Context, t *testing.T, work, image, name, kube string) *upgradeCluster {
	t.Helper()
	key, configs := clusterConfigs(ctx, t, name,
		"--control-plane", "cp-1=10.77.0.10@52:54:00:77:00:10", "--worker", "w-1=10.77.0.20@52:54:00:77:00:20")
	keyFile := key.save(t, work) // an hour-long run is worth watching from inside
	c := &upgradeCluster{
		cp:      &clusterNode{name: "cp-1", ip: "10.77.0.10", linkMAC: "52:54:00:77:00:10", mgmtMAC: "52:54:00:00:00:10"},
		w:       &clusterNode{name: "w-1", ip: "10.77.0.20", linkMAC: "52:54:00:77:00:20", mgmtMAC: "52:54:00:00:00:20"},
		key:     key,
		configs: configs,
		capture: filepath.Join(work, "link.pcap"),
	}
	cp, w := c.cp, c.w
	linkPort := freePort(t)
	for _, n := range []*clusterNode{cp, w} {
		n.m = newMachine(t, image)
		n.m.mac, n.m.memMiB = n.mgmtMAC, 3072
		// On the instruction clock, as make e2e-ha: on a host that is
		// slow for the day, two busy guests on the host's clock watch
		// their own timeouts expire (docs/operations/qemu-ci.md).
		n.m.instructionClock = true
		if n == w {
			n.m.yieldCPU()
		}
		n.sshPort = n.m.forwardSSH()
		t.Logf("%s: ssh -i %s -p %d -o StrictHostKeyChecking=no admin@127.0.0.1", n.name, keyFile, n.sshPort)
		echo := freePort(t)
		n.m.forward = append(n.m.forward, fmt.Sprintf("tcp:127.0.0.1:%d-:8080", echo))
		c.echoURLs = append(c.echoURLs, fmt.Sprintf("http://127.0.0.1:%d/", echo))
		n.disk = n.m.configDisk("config.img", withManagementNIC(t, filepath.Join(configs, n.name+".yaml"), n.mgmtMAC))
	}
	w.m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: w.linkMAC, Capture: c.capture}
	cp.m.link = &qemu.Network{Mode: qemu.NetConnect, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: cp.linkMAC}
	start := time.Now()
	w.vm = w.m.boot(ctx, configAttached(w.disk))
	cp.vm = cp.m.boot(ctx, configAttached(cp.disk))
	clockCtx, stopClocks := context.WithCancel(ctx)
	var clocks sync.WaitGroup
	for _, n := range []*clusterNode{cp, w} {
		clocks.Add(1)
		go func() { defer clocks.Done(); keepClockFromRTC(clockCtx, t, n, key) }()
	}
	t.Cleanup(func() { stopClocks(); clocks.Wait() })
	waitHealthy(ctx, t, start, "provisioned", "provisioned and healthy on "+kube, cp, w)

	// The workload: two replicas, one per node (a host port each), a
	// budget of one, and tolerating the control plane's taint so that a
	// drained node's replica has somewhere to go back to. Pod Security
	// enforces baseline, which forbids host ports (docs/security.md): its
	// namespace is labelled privileged, as an operator labels one whose
	// pods need the host.
	c.ssh = dialSSH(ctx, t, cp.sshPort, key)
	workload := `apiVersion: v1
kind: Namespace
metadata:
  name: echo
  labels: {pod-security.kubernetes.io/enforce: privileged}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      containers:
        - name: echo
          image: ghcr.io/terrarium-os/echo:1.0
          ports: [{containerPort: 8080, hostPort: 8080}]
          readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 2}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: echo, namespace: echo}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: echo}}
`
	c.ssh.run("cat > /tmp/workload.yaml <<'EOF'\n" + workload + "EOF\nkubectl apply -f /tmp/workload.yaml")
	c.ssh.run("kubectl -n echo rollout status --timeout=15m deployment/echo")
	return c
}
