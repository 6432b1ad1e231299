//go:build e2e

package qemutests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/image/pins"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// clusterResult is one measured cluster formation, written as JSON for
// scripts/bench-cluster.sh.
type clusterResult struct {
	Method string `json:"method"`
	// Seconds from power-on of both VMs. APIReady is when the API first
	// answered; NodesReady and PodNetworkReady are what the API itself
	// says, the same question for both methods (readyMarks): the last
	// node's Ready condition, and the last kube-flannel or kube-proxy
	// pod's Ready condition, every node having one of each. Healthy
	// (Terrarium only) is when the last node's firstboot said it is
	// healthy and blessed the boot.
	APIReady        float64 `json:"apiReadySeconds"`
	NodesReady      float64 `json:"nodesReadySeconds"`
	PodNetworkReady float64 `json:"podNetworkReadySeconds"`
	// FirstDeployment is when a Deployment of a bundled image, applied
	// once the cluster is Ready, runs on the worker (its pod Ready), and
	// FirstDeploymentAfterApply how long that took from its apply.
	// Both are absent when the Deployment did not run (the test fails).
	FirstDeployment           float64 `json:"firstDeploymentSeconds,omitempty"`
	FirstDeploymentAfterApply float64 `json:"firstDeploymentAfterApplySeconds,omitempty"`
	Healthy                   float64 `json:"healthySeconds,omitempty"`
	// Phases of the init node and of the worker: name and seconds from
	// power-on at which each ended, in order.
	Phases       []phaseMark `json:"phases"`
	WorkerPhases []phaseMark `json:"workerPhases,omitempty"`
	// Containers of the init node and of the worker (containerMarks).
	Containers       []containerMark `json:"containers,omitempty"`
	WorkerContainers []containerMark `json:"workerContainers,omitempty"`
}

type phaseMark struct {
	Name string  `json:"name"`
	End  float64 `json:"endSeconds"`
	// Detail is the journal's message for a failed attempt (its name
	// ends in "(retry)" or "(failed)"): why the step ran again.
	Detail string `json:"detail,omitempty"`
}

func writeResult(t *testing.T, r clusterResult) {
	t.Helper()
	dir := os.Getenv("TERRARIUM_BENCH_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	p := filepath.Join(dir, r.Method+".json")
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: API ready %.0f s, nodes Ready %.0f s, pod network on every node %.0f s, first Deployment running %.0f s after power-on (%s)",
		r.Method, r.APIReady, r.NodesReady, r.PodNetworkReady, r.FirstDeployment, p)
	if len(r.Phases) > 0 {
		tl := timeline(r, "init node", r.Phases)
		if len(r.WorkerPhases) > 0 {
			tl += "\n" + timeline(r, "worker", r.WorkerPhases)
		}
		if len(r.Containers) > 0 {
			tl += "\n" + containerTimeline(r, "init node", r.Containers)
		}
		if len(r.WorkerContainers) > 0 {
			tl += "\n" + containerTimeline(r, "worker", r.WorkerContainers)
		}
		if err := os.WriteFile(filepath.Join(dir, r.Method+"-timeline.txt"), []byte(tl), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("timelines:\n%s", tl)
	}
}

// timeAxis is the time axis every drawing of a run shares: width
// columns from power-on to the later of pod network Ready and healthy.
type timeAxis struct {
	width int
	end   float64
}

func newTimeAxis(r clusterResult) timeAxis {
	return timeAxis{width: 60, end: max(r.PodNetworkReady, r.Healthy)}
}

// col is the column of a time, within the axis.
func (a timeAxis) col(at float64) int {
	return min(max(int(at*float64(a.width)/a.end), 0), a.width)
}

// header is a drawing's first line: its title and the axis's ends.
func (a timeAxis) header(title string) string {
	return fmt.Sprintf("%-34s %s\n", title, "0 s"+strings.Repeat(" ", a.width-10)+fmt.Sprintf("%4.0f s", a.end))
}

// bar is a row's bar from one time to another, padded to the axis; a
// thin mark where the two share a column.
func (a timeAxis) bar(from, to float64) string {
	f, t := a.col(from), a.col(to)
	bar := strings.Repeat(" ", f) + strings.Repeat("█", max(t-f, 0))
	if t <= f {
		bar += "▏"
	}
	return fmt.Sprintf("%-*s", a.width, bar)
}

// timeline draws each phase of one node as a bar on a time axis, then
// why each failed attempt failed.
func timeline(r clusterResult, node string, phases []phaseMark) string {
	a := newTimeAxis(r)
	var b strings.Builder
	b.WriteString(a.header("step (" + node + ")"))
	a.steps(&b, phases)
	for _, m := range []struct {
		name string
		at   float64
	}{{"API ready", r.APIReady}, {"nodes Ready", r.NodesReady}, {"pod network on every node", r.PodNetworkReady}} {
		fmt.Fprintf(&b, "%-34s %*s\n", m.name, min(a.col(m.at), a.width-1)+1, "▲")
	}
	for _, p := range phases {
		if p.Detail != "" {
			fmt.Fprintf(&b, "%s, %s: %s\n", node, p.Name, trim(p.Detail, 600))
		}
	}
	return b.String()
}

// steps draws phases one after the other, each a row from the end of the
// one before (a phase that ended before it is left out).
func (a timeAxis) steps(b *strings.Builder, phases []phaseMark) {
	prev := 0.0
	for _, p := range phases {
		if p.End < prev {
			continue
		}
		fmt.Fprintf(b, "%-34s %s %6.1f s\n", trim(p.Name, 34), a.bar(prev, p.End), p.End-prev)
		prev = p.End
	}
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// benchPair boots a control-plane VM and a worker VM at once on a private
// link, with the given configs, and returns them with the power-on time.
func benchPair(ctx context.Context, t *testing.T, cpCfg, wCfg string) (cp, w *clusterNode, start time.Time) {
	image := fixture(t, "TERRARIUM_IMAGE")
	cp = &clusterNode{name: "cp-1", ip: "10.77.0.10", linkMAC: "52:54:00:77:00:10", mgmtMAC: "52:54:00:00:00:10"}
	w = &clusterNode{name: "w-1", ip: "10.77.0.20", linkMAC: "52:54:00:77:00:20", mgmtMAC: "52:54:00:00:00:20"}
	linkPort := freePort(t)
	for n, cfg := range map[*clusterNode]string{cp: cpCfg, w: wCfg} {
		n.m = newMachine(t, image)
		n.m.mac, n.m.memMiB = n.mgmtMAC, 3072
		if n == w {
			n.m.yieldCPU()
		}
		n.sshPort = n.m.forwardSSH()
		n.disk = n.m.configDisk("config.img", cfg)
	}
	cp.m.link = &qemu.Network{Mode: qemu.NetListen, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: cp.linkMAC}
	w.m.link = &qemu.Network{Mode: qemu.NetConnect, Peer: fmt.Sprintf("127.0.0.1:%d", linkPort), MAC: w.linkMAC}
	start = time.Now()
	cp.vm = cp.m.boot(ctx, configAttached(cp.disk))
	w.vm = w.m.boot(ctx, configAttached(w.disk))
	return cp, w, start
}

// nodePhases reads a node's journal: when each provisioning step ended,
// relative to power-on (the guest's clock is the host's).
func nodePhases(ssh *sshClient, start time.Time) ([]phaseMark, error) {
	// Copied out by sudo, then read without it and without a pty: sudo
	// relays output through a pty of its own that now and then loses it,
	// and the session's pty can cut a long journal short ("invalid
	// character ']'").
	ssh.run("sudo install -m 0644 /state/terrarium/journal.json /tmp/journal.json")
	raw, err := ssh.read("cat /tmp/journal.json")
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	i := strings.Index(raw, "{")
	if i < 0 {
		return nil, fmt.Errorf("journal: no JSON in %q", raw)
	}
	var j nodestate.Journal
	if err := json.Unmarshal([]byte(raw[i:]), &j); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return journalPhases(j, start), nil
}

// journalPhases lists the steps a journal records as ended, in order of
// their end, a failed attempt named as one and with its message, so that
// a step drawn twice says why.
func journalPhases(j nodestate.Journal, start time.Time) []phaseMark {
	var out []phaseMark
	// A step's pulled images, until the record that ends it.
	pulls := map[string][]string{}
	// A step's images found present: "8 of 8 images ...".
	present := map[string]string{}
	for _, b := range j.Boots {
		for _, s := range b.Steps {
			switch s.Result {
			case "started", "diagnostics", "waiting", "lock":
				continue
			case "pulled":
				pulls[s.Name] = append(pulls[s.Name], s.Detail)
				continue
			case "present":
				present[s.Name] = s.Detail
				continue
			}
			m := phaseMark{Name: s.Name, End: s.At.Sub(start).Seconds()}
			if s.Result == "retry" || s.Result == "failed" {
				m.Name, m.Detail = s.Name+" ("+string(s.Result)+")", s.Detail
			} else if p := pulls[s.Name]; len(p) > 0 {
				m.Detail = "pulled " + strings.Join(p, ", ")
			} else if p := present[s.Name]; p != "" {
				m.Detail = p
			}
			delete(pulls, s.Name)
			delete(present, s.Name)
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].End < out[k].End })
	if len(out) > 0 {
		out = append([]phaseMark{{Name: "power-on → firstboot (boot)", End: out[0].End}}, out...)
	}
	return out
}

// TestClusterBenchZeroTouch measures Terrarium's cluster formation: both
// VMs powered on at once, nothing done by hand.
func TestClusterBenchZeroTouch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	key, dir := clusterConfigs(ctx, t, "bench",
		"--control-plane", "cp-1=10.77.0.10@52:54:00:77:00:10", "--worker", "w-1=10.77.0.20@52:54:00:77:00:20")
	cp, w, start := benchPair(ctx, t,
		withManagementNIC(t, filepath.Join(dir, "cp-1.yaml"), "52:54:00:00:00:10"),
		withManagementNIC(t, filepath.Join(dir, "w-1.yaml"), "52:54:00:00:00:20"))
	var mu sync.Mutex
	var api, ready time.Time
	var wg sync.WaitGroup
	// The harness asks the API once the init node's admin kubeconfig is
	// in place and the worker's join is done (its kubelet's TLS
	// bootstrap), as it asks the baseline once `kubeadm join` returned,
	// and applies the first Deployment once the API shows every node's
	// pod network, while firstboot's health gates still run (each node's
	// healthy line is waited for beside it). Waiting for both nodes
	// healthy would apply it later than for the baseline.
	steps := map[*clusterNode]string{cp: `admin kubeconfig: done`, w: `kubelet TLS bootstrap: done`}
	asked := map[*clusterNode]chan struct{}{cp: make(chan struct{}), w: make(chan struct{})}
	for _, n := range []*clusterNode{cp, w} {
		wg.Add(1)
		go func(n *clusterNode) {
			defer wg.Done()
			done := asked[n]
			defer func() {
				select {
				case <-done:
				default:
					close(done) // failed before: the main goroutine must not wait
				}
			}()
			if n == cp {
				if _, err := n.vm.Expect(ctx, regexp.MustCompile(`wait for the control plane: done`)); err != nil {
					t.Errorf("%s: %v", n.name, err)
					return
				}
				mu.Lock()
				api = time.Now()
				mu.Unlock()
			}
			if _, err := n.vm.Expect(ctx, regexp.MustCompile(steps[n])); err != nil {
				t.Errorf("%s: %v", n.name, err)
				return
			}
			close(done)
			if _, err := n.vm.Expect(ctx, regexp.MustCompile(`terrarium-status: \{[^\n]*"state":"provisioned"[^\n]*"healthy":true`)); err != nil {
				t.Errorf("%s: %v", n.name, err)
				return
			}
			mu.Lock()
			if now := time.Now(); now.After(ready) {
				ready = now
			}
			mu.Unlock()
		}(n)
	}
	<-asked[cp]
	<-asked[w]
	if t.Failed() {
		wg.Wait()
		t.FailNow()
	}
	ssh := dialSSH(ctx, t, cp.sshPort, key)
	nodesReady, podNetwork := readyMarks(ctx, t, ssh, []string{cp.name, w.name}, start)
	wssh := dialSSH(ctx, t, w.sshPort, key)
	first, afterApply, firstErr := firstDeployment(ctx, t, ssh, wssh, start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Where each node's CPU went until the first Deployment ran (read
	// after it: the reading costs the starved worker seconds): a figure to
	// read (the worker, starved next to the init node, is the critical
	// path), not what the benchmark measures.
	var cpu strings.Builder
	for _, n := range []struct {
		name string
		ssh  *sshClient
	}{{"init node", ssh}, {"worker", wssh}} {
		r, err := cpuReport(n.ssh)
		if err != nil {
			t.Logf("%s: no CPU report: %v", n.name, err)
		}
		fmt.Fprintf(&cpu, "CPU of the %s from power-on until the first Deployment ran\n%s\n", n.name, r)
	}
	writeFigure(t, "terrarium-cpu.txt", cpu.String())
	// The worker's kubelet from its start to its Node's registration,
	// to read where its start goes (not logged: long); likewise its boot's critical chain to firstboot and containerd's
	// start (its CRI was ready a minute and more after its start).
	for name, cmd := range map[string]string{
		"terrarium-worker-kubelet.log":    "journalctl -u kubelet.service -o short-precise --no-pager | head -400",
		"terrarium-worker-containerd.log": "journalctl -u containerd.service -o short-precise --no-pager | head -200",
		"terrarium-worker-boot.txt":       "systemd-analyze critical-chain terrarium-firstboot.service containerd.service --no-pager 2>&1; systemd-analyze blame --no-pager 2>&1 | head -30",
	} {
		if log, err := wssh.sudoTry(cmd); err != nil {
			t.Logf("worker: no %s: %v", name, err)
		} else {
			writeArtifact(t, name, log)
		}
	}
	// The init node's controller manager, from its start: it signs the
	// worker's CSR and creates its DaemonSet pods, a minute and more
	// after its container starts.
	if log, err := ssh.read("kubectl -n kube-system logs --timestamps kube-controller-manager-cp-1 2>&1 | head -300"); err != nil {
		t.Logf("init node: no controller manager log: %v", err)
	} else {
		writeArtifact(t, "terrarium-cp-controller-manager.log", log)
	}
	phases, err := nodePhases(ssh, start)
	if err != nil {
		t.Fatalf("init node: %v", err)
	}
	// The worker's timeline is best-effort: a figure, not what the
	// benchmark measures.
	workerPhases, err := nodePhases(wssh, start)
	if err != nil {
		t.Logf("worker: no timeline: %v", err)
	}
	// The containers' times, like the worker's timeline, are figures
	// to read, not what the benchmark measures.
	containers, err := containerMarks(ctx, ssh, start)
	if err != nil {
		t.Logf("no container times: %v", err)
	}
	writeResult(t, clusterResult{Method: "terrarium", APIReady: api.Sub(start).Seconds(), NodesReady: nodesReady, PodNetworkReady: podNetwork,
		FirstDeployment: first, FirstDeploymentAfterApply: afterApply, Healthy: ready.Sub(start).Seconds(), Phases: phases, WorkerPhases: workerPhases,
		Containers: containers[cp.name], WorkerContainers: containers[w.name]})
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// cpuReport is where a node's CPU went since power-on: the boot's stages
// as systemd saw them, then the CPU time of each unit and slice (cgroup
// v2's cpu.stat), most first, and the whole machine's; and how often the
// node's own services restarted (a restart loop shows as CPU).
func cpuReport(ssh *sshClient) (string, error) {
	return ssh.read(`systemd-analyze 2>&1 | head -2; ` +
		`for f in /sys/fs/cgroup/*.slice/*/cpu.stat /sys/fs/cgroup/*.slice/cpu.stat /sys/fs/cgroup/init.scope/cpu.stat; do ` +
		`awk -v n="${f#/sys/fs/cgroup/}" '/^usage_usec/{printf "%8.1f s  %s\n", $2/1e6, n}' "$f"; done | sort -rn | head -25; ` +
		`awk '/^cpu /{printf "%8.1f s  the machine (user, nice, system, irq, softirq; /proc/stat)\n", ($2+$3+$4+$7+$8)/100}' /proc/stat; ` +
		`for u in terrarium-apilb kubelet containerd terrarium-registry terrarium-snapshotter; do echo "$u: $(systemctl show -p NRestarts --value $u) restarts"; done`)
}

// writeFigure writes a figure next to the results and logs it.
func writeFigure(t *testing.T, name, text string) {
	t.Helper()
	writeArtifact(t, name, text)
	t.Logf("%s:\n%s", name, text)
}

// writeArtifact writes a file next to the results.
func writeArtifact(t *testing.T, name, text string) {
	t.Helper()
	dir := os.Getenv("TERRARIUM_BENCH_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

// plainConfig is a node without a cluster section: the same image, the
// same network, an admin to run kubeadm by hand.
func plainConfig(host, key, mgmtMAC, linkMAC, addr string) string {
	return `apiVersion: terrarium.dev/v1alpha1
kind: MachineConfig
hostname: ` + host + `
network:
  interfaces:
    - macAddress: ` + mgmtMAC + `
      dhcp: true
    - macAddress: ` + linkMAC + `
      dhcp: false
      addresses: [` + addr + `]
admin:
  name: admin
  sshAuthorizedKeys:
    - ` + key + `
`
}

// TestClusterBenchKubeadm is the baseline: the same image, the same
// images in the same registry cache, and a plain `kubeadm init` + `kubeadm
// join` run over SSH as soon as each node can be logged into — what an
// operator's script does. Firstboot provisions only the network and the
// admin user. It gets Terrarium's leader-election flags and its kubeadm
// patches for the control plane's probes too (with kubeadm's defaults the
// controller manager keeps losing its lease under TCG and a worker may
// never finish its TLS bootstrap), its certificates' key type, and its
// patient timeouts (under TCG on a slow host kubeadm init failed once at
// its 4-minute wait for the control plane, once at its 1-minute API call
// that binds the admin's group), so the ratio compares the orchestration
// alone.
func TestClusterBenchKubeadm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	key := newSSHKey(t)
	cp, w, start := benchPair(ctx, t,
		plainConfig("cp-1", key.authorized, "52:54:00:00:00:10", "52:54:00:77:00:10", "10.77.0.10/24"),
		plainConfig("w-1", key.authorized, "52:54:00:00:00:20", "52:54:00:77:00:20", "10.77.0.20/24"))
	for _, n := range []*clusterNode{cp, w} {
		if s := expectStatus(ctx, t, n.vm, "provisioned", "failed"); s.State != "provisioned" {
			t.Fatalf("%s: %+v", n.name, s)
		}
	}
	const token = "abcdef.0123456789abcdef"
	cfg := `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens: [{token: "` + token + `"}]
localAPIEndpoint: {advertiseAddress: "10.77.0.10", bindPort: 6443}
patches: {directory: "` + kubeadmconfig.PatchesDir + `"}
timeouts: {controlPlaneComponentHealthCheck: 20m0s, kubeletHealthCheck: 10m0s, kubernetesAPICall: 2m0s, etcdAPICall: 2m0s}
nodeRegistration:
  name: cp-1
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs: [{name: node-ip, value: "10.77.0.10"}]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: "` + kubernetesVersion(t) + `"
encryptionAlgorithm: ` + kubeadmconfig.EncryptionAlgorithm + `
controlPlaneEndpoint: "10.77.0.10:6443"
networking: {podSubnet: "10.244.0.0/16", serviceSubnet: "10.96.0.0/12"}
controllerManager: {extraArgs: ` + kubeadmconfig.LeaderElectionArgs + `}
scheduler: {extraArgs: ` + kubeadmconfig.LeaderElectionArgs + `}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
resolvConf: /etc/terrarium/pod-resolv.conf
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
`
	flannel, err := addons.Flannel(addons.FlannelInput{PodCIDR: "10.244.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	// The service CIDR routed on the cluster link, as Terrarium's network
	// step does: with no default route a pod's first packet to a ClusterIP
	// (flannel's to the API, 10.96.0.1) is "Network is unreachable" before
	// kube-proxy rewrites it. Without it the baseline's flannel never runs
	// (both nodes Ready, no pod network).
	prep := "set -e; sudo ip route replace 10.96.0.0/12 dev $(ip -o -4 addr show to 10.77.0.0/24 | awk '{print $2; exit}') && " +
		"sudo mkdir -p /etc/cni/net.d /etc/terrarium && printf 'nameserver 127.0.0.53\\n' | sudo tee /etc/terrarium/pod-resolv.conf >/dev/null && " +
		"sudo tee /etc/cni/net.d/10-flannel.conflist >/dev/null <<'EOF'\n" + addons.FlannelConflist + "EOF\n"
	// Images as a plain kubeadm node has them: pullable from the node's
	// registry cache, unpacked by containerd's own overlayfs snapshotter
	// (not the slot's unpacked layers, which are Terrarium's), into an
	// empty store (not the one Terrarium's snapshotter service registered
	// the slot's images in at boot: their snapshots are its own).
	prep += "sudo sed -i \"s/^  snapshotter = 'terrarium'$/  snapshotter = 'overlayfs'/\" /etc/containerd/config.toml && " +
		"grep -q \"^  snapshotter = 'overlayfs'$\" /etc/containerd/config.toml && sudo systemctl stop containerd && " +
		"sudo rm -rf /var/lib/containerd && sudo systemctl start containerd\n"
	cpSSH, wSSH := dialSSH(ctx, t, cp.sshPort, key), dialSSH(ctx, t, w.sshPort, key)
	cpSSH.run(prep)
	wSSH.run(prep)
	// etcd as root, as a plain kubeadm node runs it.
	for name, p := range kubeadmconfig.Patches(kubeadmconfig.EtcdUser{}) {
		cpSSH.run("sudo mkdir -p " + kubeadmconfig.PatchesDir + " && sudo tee " + kubeadmconfig.PatchesDir + "/" + name + " >/dev/null <<'EOF'\n" + string(p) + "EOF\n")
	}
	cpSSH.run("cat > /tmp/kubeadm.yaml <<'EOF'\n" + cfg + "EOF\nsudo kubeadm init --config /tmp/kubeadm.yaml --ignore-preflight-errors=SystemVerification")
	api := time.Now()
	cpSSH.run("mkdir -p ~/.kube && sudo cat /etc/kubernetes/admin.conf > ~/.kube/config")
	cpSSH.run("cat > /tmp/flannel.yaml <<'EOF'\n" + string(flannel) + "EOF\nkubectl apply -f /tmp/flannel.yaml")
	ca := cpSSH.output("sudo cat /etc/kubernetes/pki/ca.crt", regexp.MustCompile(`END CERTIFICATE`))
	hash, err := machineconfig.CACertHash(ca[strings.Index(ca, "-----BEGIN"):])
	if err != nil {
		t.Fatal(err)
	}
	// As a person would, and as firstboot retries a step: up to three
	// attempts, 15 s apart, resetting what a failed one left: on a
	// starved worker the baseline's join can fail once (kubeadm's 2-s CRI
	// checks, which firstboot makes with a minute).
	// The worker's node IP, as the init node's: with no default route
	// (air-gapped) the kubelet finds no address of its own otherwise, its
	// Node has none, and flannel there crash-loops: the first
	// Deployment never gets a sandbox ("can't get ip address of node w-1
	// ... no default routes found").
	joinCfg := `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken: {apiServerEndpoint: "10.77.0.10:6443", token: "` + token + `", caCertHashes: ["` + hash + `"]}
nodeRegistration:
  name: w-1
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs: [{name: node-ip, value: "10.77.0.20"}]
  ignorePreflightErrors: [SystemVerification]
`
	wSSH.run("cat > /tmp/join.yaml <<'EOF'\n" + joinCfg + "EOF\n")
	for attempt := 1; ; attempt++ {
		// sudoTry: what comes through sudo's pty can be lost, a failed
		// join's output among it.
		out, err := wSSH.sudoTry("kubeadm join --config /tmp/join.yaml")
		if err == nil {
			break
		}
		t.Logf("kubeadm join, attempt %d of 3, %s after power-on: %v\n%s", attempt, time.Since(start).Round(time.Second), err, out)
		if attempt == 3 {
			t.Fatal("kubeadm join failed three times")
		}
		wSSH.run("sudo kubeadm reset -f >/dev/null 2>&1; sleep 15")
	}
	nodesReady, podNetwork := readyMarks(ctx, t, cpSSH, []string{cp.name, w.name}, start)
	first, afterApply, firstErr := firstDeployment(ctx, t, cpSSH, wSSH, start)
	writeResult(t, clusterResult{Method: "kubeadm", APIReady: api.Sub(start).Seconds(), NodesReady: nodesReady, PodNetworkReady: podNetwork,
		FirstDeployment: first, FirstDeploymentAfterApply: afterApply})
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// readyMarks waits (up to 20 min) until the API lists the nodes names, each
// Ready, and a Ready kube-flannel and kube-proxy pod for each, then
// returns when the last of each became Ready, in seconds after start: the
// conditions' lastTransitionTime, written by the guests' clocks, shifted
// by the offset of cp-1's clock from the host's (TCG guests drift). The
// same question is asked of both methods: Terrarium's firstboot waits for
// the pod network before it calls a node healthy, a plain kubeadm run
// does not, and the API, not either orchestrator, says when it was so.
//
// It waits on the API's events, one kubectl process watching (kubectl
// wait, kubectl rollout status), not by polling: a kubectl started every
// few seconds costs the init node CPU the joining worker needs (two every
// 5 s take about half a guest core of cp-1), and only the plain kubeadm
// half would be polled that way while its worker joins (Terrarium's is
// waited for on the consoles), slowing the baseline. A user watches from
// a workstation, not on the node.
func readyMarks(ctx context.Context, t *testing.T, ssh *sshClient, names []string, start time.Time) (nodesReady, podNetwork float64) {
	t.Helper()
	nodes := len(names)
	// The nodes Ready and the pod network's DaemonSets rolled out, waited
	// for on the API's events. The reading below then
	// finds them so at once; it polls on only if a wait gave up.
	var nodeRefs []string
	for _, n := range names {
		nodeRefs = append(nodeRefs, "node/"+n)
	}
	if out, err := ssh.try("kubectl wait --for=create --for=condition=Ready " + strings.Join(nodeRefs, " ") + " --timeout=20m && " +
		"kubectl -n kube-flannel rollout status daemonset/kube-flannel-ds --timeout=20m && " +
		"kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=20m"); err != nil {
		t.Logf("waiting on the API's events: %v\n%s", err, out)
	}
	// When the waits returned: the 21:39 run applied its Deployment 79 s
	// after the API said the pod network was Ready.
	t.Logf("the API's events waited for, %s after power-on", time.Since(start).Round(time.Second))
	const list = `-o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}'`
	deadline := time.Now().Add(20 * time.Minute)
	var last string
	for {
		nodeOut, err1 := ssh.try("kubectl get nodes " + list)
		podOut, err2 := ssh.try("kubectl get pods -A " + list)
		n, nodeAt, nodeOK := lastReady(nodeOut, "")
		f, flannelAt, flannelOK := lastReady(podOut, "kube-flannel-ds-")
		p, proxyAt, proxyOK := lastReady(podOut, "kube-proxy-")
		if err1 == nil && err2 == nil && n == nodes && f == nodes && p == nodes && nodeOK && flannelOK && proxyOK {
			g, err := readGuestTime(ctx, ssh, start)
			if err != nil {
				t.Fatalf("guest clock: %v", err)
			}
			offset := g.offset
			since := func(at time.Time) float64 { return at.Add(-offset).Sub(start).Seconds() }
			t.Logf("API: last node Ready at %s, last pod-network pod Ready at %s (guest clock %s ahead of the host's)",
				nodeAt.Format(time.TimeOnly), maxTime(flannelAt, proxyAt).Format(time.TimeOnly), offset.Round(10*time.Millisecond))
			return since(nodeAt), since(maxTime(flannelAt, proxyAt))
		}
		last = fmt.Sprintf("nodes (%v):\n%s\npods (%v):\n%s", err1, nodeOut, err2, podOut)
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("cluster not Ready with its pod network on %d nodes after 20 min:\n%s", nodes, last)
		}
		time.Sleep(5 * time.Second)
	}
}

// firstDeployment applies, as a user would once the cluster is Ready, a
// Deployment of a bundled image the worker has not run yet (etcd's, a
// long-running program) on the worker, and returns when its pod
// became Ready, in seconds after start and after its apply (by the API's
// condition, which the worker's kubelet writes: shifted by the worker's
// clock's offset, as readyMarks does).
func firstDeployment(ctx context.Context, t *testing.T, ssh, worker *sshClient, start time.Time) (atSeconds, afterApply float64, err error) {
	t.Helper()
	deploy := `apiVersion: apps/v1
kind: Deployment
metadata: {name: first, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: first}}
  template:
    metadata: {labels: {app: first}}
    spec:
      nodeSelector: {kubernetes.io/hostname: w-1}
      containers:
        - name: first
          image: registry.k8s.io/etcd:` + etcdTag(t) + `
          command: [etcd, --data-dir=/data, --listen-client-urls=http://127.0.0.1:2379,
            --advertise-client-urls=http://127.0.0.1:2379, --listen-peer-urls=http://127.0.0.1:2380]
          volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, emptyDir: {}}]
`
	applied := time.Now()
	ssh.run("cat > /tmp/first.yaml <<'EOF'\n" + deploy + "EOF\nkubectl apply -f /tmp/first.yaml")
	// Waited for on the API's events (one kubectl, watching), not polled,
	// as readyMarks waits. Its failure says nothing the reading below
	// does not.
	_, _ = ssh.try("kubectl rollout status deployment/first --timeout=15m")
	const list = `-o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}'`
	deadline := time.Now().Add(15 * time.Minute)
	for {
		out, err := ssh.try("kubectl get pods -l app=first " + list)
		if n, at, ok := lastReady(out, "first-"); err == nil && n == 1 && ok {
			g, err := readGuestTime(ctx, worker, start)
			if err != nil {
				return 0, 0, fmt.Errorf("the worker's clock: %w", err)
			}
			ready := at.Add(-g.offset)
			return ready.Sub(start).Seconds(), ready.Sub(applied).Seconds(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			// What the pod waited on, for the next run to fix.
			why, werr := ssh.read("kubectl get pods -A -o wide 2>&1; kubectl describe pods -l app=first 2>&1 | tail -n 40; kubectl get events -A --sort-by=.lastTimestamp 2>&1 | tail -n 30; " +
				"kubectl -n kube-flannel logs --tail=30 $(kubectl -n kube-flannel get pods --field-selector spec.nodeName=w-1 -o name) 2>&1")
			// The worker's side: a baseline worker can lack flannel's
			// lease file though its flannel pod is Ready.
			wwhy, wwerr := worker.sudoTry("ls -la /run/flannel /etc/cni/net.d; crictl ps -a 2>&1 | head -20; journalctl -u kubelet --no-pager 2>&1 | tail -n 40")
			diag := fmt.Sprintf("%s\ncontrol plane (%v):\n%s\nworker (%v):\n%s", out, werr, why, wwerr, wwhy)
			if err != nil {
				return 0, 0, fmt.Errorf("the first Deployment did not run on the worker in 15 min: %w\n%s", err, diag)
			}
			return 0, 0, fmt.Errorf("the first Deployment did not run on the worker in 15 min:\n%s", diag)
		}
		time.Sleep(2 * time.Second)
	}
}

// lastReady reads "name status lastTransitionTime" lines, those whose
// name starts with prefix: how many, the latest time, and whether all are
// Ready.
func lastReady(out, prefix string) (n int, last time.Time, allReady bool) {
	allReady = true
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		n++
		if len(f) != 3 || f[1] != "True" {
			allReady = false
			continue
		}
		at, err := time.Parse(time.RFC3339, f[2])
		if err != nil {
			allReady = false
			continue
		}
		last = maxTime(last, at)
	}
	return n, last, allReady && n > 0
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// etcdTag is the bundle's etcd image tag.
func etcdTag(t *testing.T) string {
	v, err := pins.Load("../components")
	if err != nil {
		t.Fatal(err)
	}
	return v.EtcdTag()
}

// kubernetesVersion is the image's Kubernetes version (its bundle's pin).
func kubernetesVersion(t *testing.T) string {
	b, err := os.ReadFile("../components/versions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kubernetes:\s*(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("components/versions.yaml names no kubernetes version")
	}
	return string(m[1])
}

// containerMark is one container of a pod: when its pod was created (a
// static pod's is its mirror pod's, made once the API answers, after the
// container started) and when the container started, in seconds after
// power-on.
type containerMark struct {
	Name    string  `json:"name"`
	Created float64 `json:"createdSeconds"`
	Started float64 `json:"startedSeconds"`
	// Restarts is the container's restart count: Started is its last
	// start.
	Restarts int `json:"restarts,omitempty"`
}

// containerMarks asks the API when each pod was created and each of its
// containers (init containers too) last started, by node, in seconds
// after start (the times shifted by cp-1's clock's offset from the
// host's; containers' start times come from their own node's clock, within
// a second of cp-1's once chrony has run): what the init node's "wait for
// the control plane" and the worker's last steps are made of. crictl is
// not in the image.
func containerMarks(ctx context.Context, ssh *sshClient, start time.Time) (map[string][]containerMark, error) {
	raw, err := ssh.read("kubectl get pods -A -o json")
	if err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	g, err := readGuestTime(ctx, ssh, start)
	if err != nil {
		return nil, fmt.Errorf("guest clock: %w", err)
	}
	since := func(at time.Time) float64 { return at.Add(-g.offset).Sub(start).Seconds() }
	type status struct {
		Name         string
		RestartCount int
		State        struct {
			Running    *struct{ StartedAt time.Time }
			Terminated *struct{ StartedAt time.Time }
		}
	}
	var pods struct {
		Items []struct {
			Metadata struct {
				Name              string
				CreationTimestamp time.Time
			}
			Spec   struct{ NodeName string }
			Status struct {
				InitContainerStatuses []status
				ContainerStatuses     []status
			}
		}
	}
	if err := json.Unmarshal([]byte(raw[max(strings.Index(raw, "{"), 0):]), &pods); err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	out := map[string][]containerMark{}
	for _, p := range pods.Items {
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			var started time.Time
			switch {
			case c.State.Running != nil:
				started = c.State.Running.StartedAt
			case c.State.Terminated != nil:
				started = c.State.Terminated.StartedAt
			default:
				continue
			}
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], containerMark{
				Name:     p.Metadata.Name + "/" + c.Name,
				Created:  since(p.Metadata.CreationTimestamp),
				Started:  since(started),
				Restarts: c.RestartCount,
			})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pods: no started container in %q", trim(raw, 300))
	}
	for _, cs := range out {
		sort.SliceStable(cs, func(i, k int) bool { return cs[i].Started < cs[k].Started })
	}
	return out, nil
}

// containerTimeline draws each container as a bar from its creation to
// its start, on the same axis as timeline.
func containerTimeline(r clusterResult, node string, cs []containerMark) string {
	a := newTimeAxis(r)
	var b strings.Builder
	b.WriteString(a.header("container (" + node + ")"))
	for _, c := range cs {
		restarts := ""
		if c.Restarts > 0 {
			restarts = fmt.Sprintf(" (%d restarts)", c.Restarts)
		}
		fmt.Fprintf(&b, "%-34s %s %5.1f s → %5.1f s%s\n", trim(c.Name, 34), a.bar(c.Created, c.Started), c.Created, c.Started, restarts)
	}
	return b.String()
}
