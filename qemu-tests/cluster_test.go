//go:build e2e

package qemutests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/cisbench"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// clusterSubnet is the private link between the VMs: the cluster network.
var clusterSubnet = &net.IPNet{IP: net.IPv4(10, 77, 0, 0), Mask: net.CIDRMask(24, 32)}

// clusterNode is one VM of the e2e cluster.
type clusterNode struct {
	name, ip, linkMAC, mgmtMAC string
	m                          *machine
	vm                         *qemu.VM
	sshPort                    int
	disk                       string
}

// shareCPU gives a node that yielded the host's cores while its cluster
// formed (yieldCPU) its share back once the control plane is healthy:
// niceness 0 for its QEMU's threads, as each node has its own CPU on real
// hardware. At niceness 10 beside a control plane's two busy vCPUs, a
// worker got a few percent of a core: its pods' sandboxes timed out, its
// probes failed and its Node went NotReady (make e2e). Its next boot
// yields again (m.nice) until the caller shares again.
func shareCPU(t *testing.T, nodes ...*clusterNode) {
	t.Helper()
	for _, n := range nodes {
		if n.m.nice == 0 {
			continue
		}
		require.NoError(t, n.vm.SetNice(0), "%s: QEMU's niceness back to 0", n.name)
		t.Logf("%s: QEMU at niceness 0 now that the cluster is healthy", n.name)
	}
}

// clusterConfigs makes a new admin SSH key and runs `imagebuild config
// cluster --name NAME ARGS...` with it, writing into a new directory; it
// returns the key and that directory (secrets.yaml, NODE.yaml, NODE.img).
func clusterConfigs(ctx context.Context, t *testing.T, name string, args ...string) (sshKey, string) {
	t.Helper()
	work := t.TempDir()
	key := newSSHKey(t)
	pub := filepath.Join(work, "admin.pub")
	if err := os.WriteFile(pub, []byte(key.authorized+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(work, "cluster")
	args = append([]string{"config", "cluster", "--name", name, "--ssh-key", pub, "-o", dir}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(fixture(t, "TERRARIUM_BIN"), "imagebuild"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("imagebuild config cluster: %v\n%s", err, out)
	}
	t.Logf("imagebuild config cluster:\n%s", out)
	return key, dir
}

// waitHealthy waits until every node's status says state and healthy,
// logging when each got there (after start, as what), and stops the test
// if one never does.
func waitHealthy(ctx context.Context, t *testing.T, start time.Time, state, what string, nodes ...*clusterNode) {
	t.Helper()
	re := regexp.MustCompile(`terrarium-status: \{[^\n]*"state":"` + state + `"[^\n]*"healthy":true`)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func(n *clusterNode) {
			defer wg.Done()
			if _, err := n.vm.Expect(ctx, re); err != nil {
				t.Errorf("%s: waiting for a healthy %s node: %v", n.name, state, err)
				return
			}
			t.Logf("%s: %s %s after power-on", n.name, what, time.Since(start).Round(time.Second))
		}(n)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// withManagementNIC adds the test's management NIC (DHCP on QEMU's
// restricted network, for SSH from the test) to a config written by
// `imagebuild config cluster`, which configures only the cluster link.
func withManagementNIC(t *testing.T, path, mac string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "  interfaces:\n", "  interfaces:\n    - macAddress: "+mac+"\n      dhcp: true\n", 1)
	if s == string(b) {
		t.Fatalf("%s has no network.interfaces to extend", path)
	}
	return s
}

// TestClusterFormation: from `imagebuild config cluster` to a working
// two-node cluster, fully offline. Both VMs boot at the same time from the
// default image on a private link with no route out, each with its own
// config disk. The init VM is killed hard in the middle of its
// provisioning and started again: it resumes. Then both nodes are Ready,
// CoreDNS runs, a pod on the worker runs an image that only the control
// plane has (side-loaded there), and a Service reaches it from the other
// node; a NetworkPolicy blocks and then admits a pod on the control plane
// reaching it. The worker's volumes live on a second disk of its own,
// formatted on first use; they survive its power cuts. Every packet of
// the whole run stays inside the test networks.
func TestClusterFormation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	image, bin := fixture(t, "TERRARIUM_IMAGE"), fixture(t, "TERRARIUM_BIN")
	work := t.TempDir()
	cp := &clusterNode{name: "cp-1", ip: "10.77.0.10", linkMAC: "52:54:00:77:00:10", mgmtMAC: "52:54:00:00:00:10"}
	w := &clusterNode{name: "w-1", ip: "10.77.0.20", linkMAC: "52:54:00:77:00:20", mgmtMAC: "52:54:00:00:00:20"}
	key, configs := clusterConfigs(ctx, t, "e2e",
		"--control-plane", cp.name+"="+cp.ip+"@"+cp.linkMAC, "--worker", w.name+"="+w.ip+"@"+w.linkMAC, "--load-balancer", lbPool)
	if fi, err := os.Stat(filepath.Join(configs, "secrets.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets.yaml: %v, mode %v; want 0600", err, fi.Mode())
	}
	bundleDisk := filepath.Join(work, "bundle.img")
	// Signed with the cluster's key: its nodes trust it (for configs and
	// bundles), and a node that trusts any key takes only signed bundles.
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "bundle", "disk", "../bundles/sideload-test.yaml",
		"--sign", filepath.Join(configs, "secrets.yaml"), "-o", bundleDisk).CombinedOutput(); err != nil {
		t.Fatalf("imagebuild bundle disk: %v\n%s", err, out)
	}

	// The cluster's link is a multicast Ethernet segment, where the test
	// joins as a station of the plant network (l2Station).
	group := fmt.Sprintf("230.0.77.1:%d", freePort(t))
	linkCap := filepath.Join(work, "link.pcap")
	for _, n := range []*clusterNode{cp, w} {
		n.m = newMachine(t, image)
		n.m.mac = n.mgmtMAC
		n.m.memMiB = 3072
		if n == w {
			n.m.yieldCPU()
		}
		n.sshPort = n.m.forwardSSH()
		cfg := withManagementNIC(t, filepath.Join(configs, n.name+".yaml"), n.mgmtMAC)
		if n == w {
			cfg = withVolumeDisk(t, cfg, workerVolumeDisk)
		}
		n.disk = n.m.configDisk("config.img", cfg)
	}
	// The worker's volume area is a whole second disk, formatted on first
	// use; the control plane's the file on TERRA-STATE.
	dataDisk := filepath.Join(work, "w-1-data.qcow2")
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", dataDisk, "2G").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v\n%s", err, out)
	}
	data := qemu.Disk{ID: "data", Path: dataDisk, Format: "qcow2", Serial: workerVolumeDisk}
	// The capture is on the worker, which the formation's cuts leave up:
	// on the segment it sees every frame.
	w.m.link = &qemu.Network{Mode: qemu.NetMulticast, Peer: group, MAC: w.linkMAC, Capture: linkCap}
	cp.m.link = &qemu.Network{Mode: qemu.NetMulticast, Peer: group, MAC: cp.linkMAC}
	apiPort := cp.m.forwardAPI()
	// The worker's RTC runs three hours behind (a machine off the shelf
	// in another time zone's local time): it must step, then follow the
	// init node. Its restart after the site power cut keeps the host's.
	w.m.rtcBase = time.Now().UTC().Add(-3 * time.Hour).Format("2006-01-02T15:04:05")

	start := time.Now()
	bootCP := func() *qemu.VM {
		return cp.m.boot(ctx, configAttached(cp.disk), qemu.Disk{ID: "bundle", Path: bundleDisk, Format: "raw", ReadOnly: true})
	}
	w.vm = w.m.boot(ctx, configAttached(w.disk), data)
	cp.vm = bootCP()

	// Power cut once the image unpack window is open, as the init node's
	// images step starts (where a cut used to leave etcd's and
	// kube-apiserver's images torn for good): the next boot starts
	// containerd from an empty store, registers the slot's images in it
	// again (pkg/node/images/imageseed), and forms the cluster.
	if _, err := cp.vm.Expect(ctx, regexp.MustCompile(`pull images: started`)); err != nil {
		t.Fatalf("init node never reached its images step: %v", err)
	}
	t.Logf("%s: power cut during pull images, %s after power-on", cp.name, time.Since(start).Round(time.Second))
	cutPower(ctx, t, cp.vm)
	cp.vm = bootCP()
	if _, err := cp.vm.Expect(ctx, regexp.MustCompile(`containerd was unpacking images .* removing /var/lib/containerd`)); err != nil {
		t.Fatalf("after a power cut during the pulls, containerd's store was not dropped: %v", err)
	}

	// Power cut: kill the init VM hard once kubeadm has started the
	// control plane, then power it on again.
	if _, err := cp.vm.Expect(ctx, regexp.MustCompile(`init phase kubelet-start: started`)); err != nil {
		t.Fatalf("init node never reached kubelet-start: %v", err)
	}
	t.Logf("%s: power cut during kubelet-start, %s after power-on", cp.name, time.Since(start).Round(time.Second))
	cutPower(ctx, t, cp.vm)
	cp.vm = bootCP()
	if _, err := cp.vm.Expect(ctx, regexp.MustCompile(`init phase kubelet-start: started`)); err != nil {
		t.Fatalf("after the power cut, the init node did not resume at kubelet-start: %v", err)
	}
	resumed := cp.vm.Console()
	if strings.Contains(resumed, "init phase certs all: started") {
		t.Errorf("after the power cut the init node ran the certs phase again; it should resume after the last completed step")
	}

	// On failure, what the nodes say about their kubelet and containers.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range []*clusterNode{cp, w} {
			dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			c := dialSSH(dctx, t, n.sshPort, key)
			// Into a file first, then read until whole (see sshClient.output).
			if out, err := c.try("{ sudo journalctl -u kubelet --no-pager -n 40 -o cat; sudo ctr -n k8s.io containers ls; sudo cat /state/terrarium/journal.json | head -60; " +
				"K='sudo kubectl --kubeconfig /etc/kubernetes/admin.conf'; $K get pods -A -o wide; $K get events -A --sort-by=.lastTimestamp | tail -30; " +
				"$K -n kube-system describe pods -l k8s-app=kube-dns | tail -25; " +
				"$K -n kube-flannel logs -l app=flannel --tail=25; $K -n kube-system logs -l k8s-app=kube-proxy --tail=15; " +
				"$K -n kube-system logs -l app=kube-network-policies --tail=15; } > /tmp/diagnostics.txt 2>&1"); err != nil {
				t.Logf("%s diagnostics: %v: %s", n.name, err, out)
			}
			out := c.output("cat /tmp/diagnostics.txt; echo '--- end of diagnostics'", regexp.MustCompile(`--- end of diagnostics`))
			t.Logf("%s diagnostics:\n%s", n.name, out)
			dcancel()
		}
	})
	waitHealthy(ctx, t, start, "provisioned", "provisioned, healthy and in the cluster", cp, w)
	shareCPU(t, cp, w)

	ssh := dialSSH(ctx, t, cp.sshPort, key)
	nodes := ssh.output("kubectl get nodes -o wide", regexp.MustCompile(`(?s)cp-1\s+Ready.*w-1\s+Ready`))
	if !regexp.MustCompile(`(?s)cp-1\s+Ready.*w-1\s+Ready`).MatchString(nodes) {
		t.Fatalf("nodes are not both Ready:\n%s", nodes)
	}
	t.Logf("kubectl get nodes:\n%s", nodes)
	ssh.retry("kubectl -n kube-system wait --for=condition=Available --timeout=8m deployment/coredns")
	// One kubeadm step run again alone on the formed init node, as the
	// runbook says (firstboot run --phase kubernetes/STEP): kubeadm keeps
	// the kubeconfigs it finds valid, and the API still answers.
	// Its output through a file (sudoTry): through the pty it once came
	// back empty though the command had exited 0.
	rerun, rerr := ssh.sudoTry("firstboot run --phase kubernetes/init-phase-kubeconfig-all")
	assert.NoError(t, rerr, rerun)
	assert.Contains(t, rerun, "kubernetes/init-phase-kubeconfig-all: done")
	ssh.retry("kubectl get --raw /readyz")
	checkWorkerClock(ctx, t, w, key, cp.ip)
	w.m.rtcBase = ""
	checkUpgradeRBAC(ctx, t, w, key)

	manifest := `apiVersion: v1
kind: Pod
metadata: {name: echo, labels: {app: echo}}
spec:
  nodeName: w-1
  containers:
    - name: echo
      image: quay.io/terrarium/sideloaded:1.0
      ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
`
	ssh.retry("cat > /tmp/echo.yaml <<'EOF'\n" + manifest + "EOF\nkubectl apply -f /tmp/echo.yaml")
	ssh.retry("kubectl wait --for=condition=Ready --timeout=10m pod/echo")
	ip := strings.TrimSpace(ssh.output("kubectl get service echo -o jsonpath='{.spec.clusterIP}{\"\\n\"}'", regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+`)))
	var (
		got string
		err error
	)
	for try := 0; try < 30; try++ {
		got, err = ssh.try("busybox wget -q -T 5 -O - http://" + ip + "/")
		if err == nil && strings.Contains(got, "echo") {
			break
		}
		time.Sleep(5 * time.Second)
	}
	if !strings.Contains(got, "echo") {
		t.Fatalf("the echo Service (%s) did not answer from %s: %v %s", ip, cp.name, err, got)
	}
	t.Logf("Service %s on %s answered %q from %s", ip, w.name, strings.TrimSpace(got), cp.name)

	// The hardened cluster (docs/security.md): a Secret is encrypted in
	// etcd, its creation is in the audit log without its body, a
	// privileged pod is refused in default, and NetworkPolicy is enforced
	// between pods on the two nodes.
	secret := checkSecretEncrypted(t, ssh)
	checkAuditLine(t, ssh, secret)
	checkPodSecurityRefuses(t, ssh)
	checkNodeHardening(t, ssh, cp.name, w.name)
	checkNetworkPolicy(t, ssh, cp.name)
	checkCISBenchmark(t, ssh, cp.name, cisbench.ControlPlane)
	checkCISBenchmark(t, dialSSH(ctx, t, w.sshPort, key), w.name, cisbench.Worker)
	// A workload's storage: a StatefulSet's claim on the worker, kept
	// across the power cut below.
	volume, haveVolume := checkLocalStorage(t, ssh, dialSSH(ctx, t, w.sshPort, key), w.name, workerVolumeDisk)
	// Resource metrics: kubectl top for both nodes, an HPA on CPU.
	checkMetrics(t, ssh, flannelImage(t, ssh), cp.name, w.name)
	logAuditGrowth(t, ssh)
	// LoadBalancer addresses: a station of the plant network on the
	// cluster's link reaches a Service's address, answered for by one
	// node, and by the cluster's link only.
	station := newL2Station(t, group, stationMAC, stationIP)
	lbNode := checkLoadBalancer(ctx, t, ssh, station, cp, w)
	lbIP := netip.MustParseAddr(lbFirst)
	if lbNode != nil {
		assert.Contains(t, arpSenders(t, linkCap, lbIP), lbNode.linkMAC, "the cluster's link carries %s's answers for %s", lbNode.name, lbIP)
	}

	// The site loses power, and the config sticks are gone when it comes
	// back: each node boots from its stored state and rejoins. The node
	// that answers for the LoadBalancer address goes first: the other
	// takes the address over.
	if lbNode != nil {
		checkLoadBalancerFailover(ctx, t, ssh, key, station, lbNode, []*clusterNode{cp, w})
	}
	for _, n := range []*clusterNode{w, cp} {
		if n != lbNode { // the failover cut that one
			cutPower(ctx, t, n.vm)
		}
	}
	for _, n := range []*clusterNode{cp, w} {
		assert.Empty(t, arpSenders(t, n.m.capture, lbIP), "%s's management NIC never answers for the LoadBalancer address %s", n.name, lbIP)
	}
	restart := time.Now()
	linkCap2 := filepath.Join(work, "link-after-cut.pcap")
	w.m.link.Capture = linkCap2 // a new QEMU would truncate the first capture
	w.vm = w.m.boot(ctx, data)
	cp.vm = cp.m.boot(ctx)
	// The worker's new QEMU starts at its niceness again. Once the control
	// plane is back it runs a formed cluster's steady load (1.7 of the
	// host's 2 cores in today's runs), beside which a worker at niceness
	// 10 starved: its boot after the cut took over 12 minutes and missed
	// the step's deadline. It gets its share as soon as cp-1 is healthy.
	waitHealthy(ctx, t, restart, "verified", "verified and healthy without its stick", cp)
	shareCPU(t, w)
	waitHealthy(ctx, t, restart, "verified", "verified and healthy without its stick", w)
	ssh = dialSSH(ctx, t, cp.sshPort, key)
	nodes = ssh.output("kubectl get nodes -o wide", regexp.MustCompile(`(?s)cp-1\s+Ready.*w-1\s+Ready`))
	if !regexp.MustCompile(`(?s)cp-1\s+Ready.*w-1\s+Ready`).MatchString(nodes) {
		t.Fatalf("after the power cut without sticks, nodes are not both Ready:\n%s", nodes)
	}
	t.Logf("after the power cut, without sticks:\n%s", nodes)
	// The audit line written before the cut is still on STATE, and the
	// volume's data on the worker's.
	checkAuditLine(t, ssh, secret)
	if haveVolume {
		checkLocalVolumeKept(t, ssh, dialSSH(ctx, t, w.sshPort, key), w.name, volume, "the power cut of "+w.name)
	}
	// The LoadBalancer address answers again.
	if lbNode != nil {
		if n, mac, err := answering(ctx, station, lbIP, lbFailover, nil, []*clusterNode{cp, w}); assert.NoError(t, err, "after the power cut, no node answers for %s", lbIP) {
			if assert.NoError(t, connectWithin(ctx, station, mac, lbIP, lbFailover), "after the power cut, %s:80 via %s", lbIP, n.name) {
				t.Logf("after the power cut: %s answers for %s and it takes connections", n.name, lbIP)
			} else {
				out, _ := ssh.read("kubectl get pods -o wide -l app=" + lbService + "; kubectl get endpointslices -o wide -l kubernetes.io/service-name=" + lbService +
					"; kubectl get events --sort-by=.lastTimestamp | grep " + lbService + " | tail -20")
				t.Logf("the %s pods, endpoints and events:\n%s", lbService, out)
			}
		}
	}
	// What the worker's health gate waited on, and its pods' restarts
	// (a pod in CrashLoopBackOff waits out its back-off).
	waited := regexp.MustCompile(`[^\n]*(health|pod network|waiting)[^\n]*`).FindAllString(w.vm.Console(), -1)
	if len(waited) > 12 {
		waited = waited[len(waited)-12:]
	}
	t.Logf("%s's health gate after the power cut:\n%s", w.name, strings.Join(waited, "\n"))
	t.Logf("%s's pods after the power cut:\n%s", w.name, ssh.output("kubectl get pods -A -o wide --field-selector spec.nodeName="+w.name, regexp.MustCompile(`RESTARTS`)))

	// Time: the worker follows the init node, which is the cluster's
	// reference.
	if !regexp.MustCompile(`"time":"10\.77\.0\.10 \(stratum \d+\), offset`).MatchString(w.vm.Console()) {
		t.Errorf("the worker's status does not name the init node as its time source")
	}
	if !strings.Contains(cp.vm.Console(), `"time":"local clock (the cluster's reference`) {
		t.Errorf("the init node's status does not say its clock is the cluster's reference")
	}

	// The operator's own kubectl: the kubeconfig config cluster wrote,
	// used from the host.
	checkOperatorKubeconfig(ctx, t, filepath.Join(configs, "admin.kubeconfig"), apiPort, cp.ip, cp.name, w.name)

	// A support bundle: a TERRA-SUPPORT stick inserted into the control
	// plane receives one archive with no secret of the cluster in it.
	checkSupportStick(ctx, t, cp.vm, filepath.Join(work, "support.img"), filepath.Join(configs, "secrets.yaml"))

	for _, n := range []*clusterNode{cp, w} {
		if err := n.vm.Quit(ctx); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []string{linkCap, linkCap2} {
		pkts := checkCapture(t, c, clusterSubnet)
		t.Logf("cluster link capture %s: %d packets, all inside %s", filepath.Base(c), pkts, clusterSubnet)
	}
	for _, n := range []*clusterNode{cp, w} {
		pkts := checkCapture(t, n.m.capture, testSubnet)
		t.Logf("%s management capture: %d packets, all inside %s", n.name, pkts, testSubnet)
	}
}

// checkWorkerClock: the worker, whose RTC started three hours behind,
// stepped its clock forward before anything else (the console says from
// when) and ends within a second of the init node, its time source, by
// chrony's own measure.
func checkWorkerClock(ctx context.Context, t *testing.T, w *clusterNode, key sshKey, source string) {
	t.Helper()
	m := regexp.MustCompile(`time: stepped: the clock read (\S+)(?: \(the hardware clock read \S+\))?, before`).FindStringSubmatch(w.vm.Console())
	if m == nil {
		t.Errorf("%s: the console does not say its clock was stepped", w.name)
	} else if read, err := time.Parse(time.RFC3339, m[1]); err != nil {
		t.Errorf("%s: stepped from %q: %v", w.name, m[1], err)
	} else {
		behind := time.Since(read)
		t.Logf("%s: clock read %s at its step, %s behind the host's now", w.name, m[1], behind.Round(time.Second))
		assert.Greater(t, behind, 2*time.Hour+50*time.Minute, "the worker's clock started three hours behind")
	}
	c := dialSSH(ctx, t, w.sshPort, key)
	out, err := c.read("sudo chronyc -c tracking") // chronyd listens on its root-only socket (cmdport 0)
	require.NoError(t, err, "chronyc tracking on %s", w.name)
	tr, err := timesync.ParseTracking(out)
	require.NoError(t, err, "chronyc tracking on %s: %s", w.name, out)
	t.Logf("%s: %s", w.name, tr)
	assert.Equal(t, source, tr.Source, "the worker follows the init node")
	assert.Less(t, tr.Offset.Abs(), time.Second, "the worker's clock is within a second of the init node's")
}

// checkUpgradeRBAC: the worker's own kubelet credential, against the real
// API server, reads the cluster's upgrade record and writes its own
// status object (which cp-1 created for it, and w-1 wrote its first
// status into), and is refused (403 Forbidden) the record's write, another
// node's status object, and creating one (pkg/node/kube/addons'
// Upgrades and NodeUpgradeStatus; the unit tests judge the same manifests
// with a fake authorizer).
func checkUpgradeRBAC(ctx context.Context, t *testing.T, w *clusterNode, key sshKey) {
	t.Helper()
	c := dialSSH(ctx, t, w.sshPort, key)
	const k = "kubectl --kubeconfig /etc/kubernetes/kubelet.conf -n kube-system"
	// cp-1 lists the nodes every minute and creates each one's object;
	// w-1 writes its status at its next look.
	var own string
	var err error
	deadline := time.Now().Add(5 * time.Minute)
	for {
		own, err = c.sudoTry(k + ` get configmap terrarium-upgrade-status-w-1 -o jsonpath='{.data.status\.json}'`)
		if (err == nil && strings.Contains(own, `"node":"w-1"`)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Second)
	}
	require.NoError(t, err, "w-1 reads its own upgrade status object as itself: %s", own)
	assert.Contains(t, own, `"node":"w-1"`, "w-1 wrote its own status")
	t.Logf("w-1's upgrade status, as w-1 reads it: %s", own)

	out, err := c.sudoTry(k + " get configmap terrarium-upgrades -o name")
	require.NoError(t, err, "every node reads the record: %s", out)

	for _, tc := range []struct{ what, cmd, verb string }{
		// --validate=false: the API server's answer is the point, not
		// kubectl's schema download, which once timed out first.
		{"the record's write", k + " get configmap terrarium-upgrades -o json > /tmp/record.json && " + k + " replace --validate=false -f /tmp/record.json", "update"},
		{"another node's status object", k + ` create configmap terrarium-upgrade-status-cp-1 --from-literal=status.json='{"node":"cp-1","phase":"done"}' --dry-run=client -o yaml | ` +
			k + " replace --validate=false -f -", "update"},
		{"reading another node's status object", k + " get configmap terrarium-upgrade-status-cp-1", "get"},
		{"creating a status object", k + " create configmap terrarium-upgrade-status-w-9", "create"},
	} {
		// An API too slow to answer at all (a timeout, a reset) is asked
		// again: only its answer counts.
		var out string
		var err error
		for try := 0; try < 3; try++ {
			if out, err = c.sudoTry(tc.cmd); err == nil || !apiUnanswered.MatchString(out) {
				break
			}
			time.Sleep(5 * time.Second)
		}
		assert.Error(t, err, "%s: w-1's credential must be refused:\n%s", tc.what, out)
		// kubectl says "Forbidden" for a get or a replace, "forbidden"
		// for a create: both are the API server's 403.
		assert.Regexp(t, `(?i)forbidden.*User "system:node:w-1" cannot `+tc.verb+` resource "configmaps"`, out, tc.what)
		t.Logf("w-1 refused %s: %s", tc.what, strings.TrimSpace(out))
	}
}

// apiUnanswered is kubectl's output when the API server gave no answer
// (under TCG, now and then): a timeout, a reset, a cut stream.
var apiUnanswered = regexp.MustCompile(`(?i)Client\.Timeout|deadline exceeded|connection reset|TLS handshake timeout|: EOF`)

// e2eSecret is a Secret the test created, and its value in plain text.
type e2eSecret struct{ name, plain string }

// etcdctlAsAPIServer reads the control plane's etcd as kube-apiserver
// does, with its etcd client certificate
// (pkg/node/kube/etcdmember.ClientFlags).
// workerVolumeDisk is the serial of the disk that is w-1's volume area in
// TestClusterFormation (cluster.localStorage.disk).
const workerVolumeDisk = "TERRA-DATA-W1"

const etcdctlAsAPIServer = "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt " +
	"--cert=/etc/kubernetes/pki/apiserver-etcd-client.crt --key=/etc/kubernetes/pki/apiserver-etcd-client.key"

// checkSecretEncrypted creates a Secret with kubectl and reads it raw
// from etcd on the control plane: secretbox's prefix, never the value.
func checkSecretEncrypted(t *testing.T, ssh *sshClient) e2eSecret {
	t.Helper()
	s := e2eSecret{name: "e2e-at-rest", plain: fmt.Sprintf("terrarium-plain-%d", time.Now().UnixNano())}
	if out, err := ssh.read("kubectl create secret generic " + s.name + " --from-literal=value=" + s.plain); err != nil {
		t.Fatalf("kubectl create secret %s: %v\n%s", s.name, err, out)
	}
	t.Logf("Secret %s in etcd: encrypted with %s", s.name, etcdSecretKey(t, ssh, "default", s.name, s.plain))
	return s
}

// auditLogSize prints the bytes of the control plane's audit log, its
// rotated files included, from the log's directory.
const auditLogSize = "cd /var/log/kubernetes/audit && du -cb audit* | tail -1 | cut -f1"

// logAuditGrowth logs how much audit log the control plane has written
// since its first event: an upper bound of an idle cluster's rate, since
// it spans the formation and the test's own calls.
func logAuditGrowth(t *testing.T, ssh *sshClient) {
	t.Helper()
	out, err := ssh.sudoTry(auditLogSize + " && head -1 audit.log && date -u +%Y-%m-%dT%H:%M:%SZ")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 {
		t.Logf("audit log's size: %v\n%s", err, out)
		return
	}
	var first struct {
		At time.Time `json:"requestReceivedTimestamp"`
	}
	now, err1 := time.Parse(time.RFC3339, lines[2])
	var size int64
	_, err2 := fmt.Sscan(lines[0], &size)
	if err := errors.Join(json.Unmarshal([]byte(lines[1]), &first), err1, err2); err != nil || !now.After(first.At) {
		t.Logf("audit log's size: %v\n%s", err, out)
		return
	}
	span := now.Sub(first.At)
	t.Logf("audit log: %d bytes in %s since its first event, %.2f MB an hour (formation and the test's calls included)",
		size, span.Round(time.Second), float64(size)/1e6/span.Hours())
}

// checkAuditLine finds the audit event of the Secret's creation by the
// admin (kubeadm's admin.conf, the admin user's kubeconfig) on the
// control plane: metadata only, never the Secret's body.
func checkAuditLine(t *testing.T, ssh *sshClient, s e2eSecret) {
	t.Helper()
	const log = "/var/log/kubernetes/audit/audit.log"
	var out string
	var err error
	for try := 0; try < 10; try++ {
		out, err = ssh.sudoTry("grep -F '\"name\":\"" + s.name + "\"' " + log + " | grep -F '\"verb\":\"create\"' || true")
		if err == nil && strings.Contains(out, `"resource":"secrets"`) {
			break
		}
		time.Sleep(3 * time.Second)
	}
	if err != nil {
		t.Errorf("reading the audit log %s on the control plane: %v\n%s", log, err, out)
		return
	}
	var found bool
	for _, line := range strings.Split(out, "\n") {
		var ev struct {
			Level     string                                     `json:"level"`
			Verb      string                                     `json:"verb"`
			User      struct{ Username string }                  `json:"user"`
			ObjectRef struct{ Resource, Namespace, Name string } `json:"objectRef"`
			Request   json.RawMessage                            `json:"requestObject"`
			Response  json.RawMessage                            `json:"responseObject"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(line)), &ev) != nil || ev.ObjectRef.Resource != "secrets" || ev.ObjectRef.Name != s.name {
			continue
		}
		found = true
		if ev.User.Username != "kubernetes-admin" || ev.Verb != "create" || ev.ObjectRef.Namespace != "default" {
			t.Errorf("the audit event of Secret %s's creation names user %q, verb %q, namespace %q; want kubernetes-admin, create, default:\n%s",
				s.name, ev.User.Username, ev.Verb, ev.ObjectRef.Namespace, line)
		}
		if ev.Level != "Metadata" || len(ev.Request) > 0 || len(ev.Response) > 0 || strings.Contains(line, s.plain) ||
			strings.Contains(line, base64.StdEncoding.EncodeToString([]byte(s.plain))) {
			t.Errorf("the audit event of Secret %s's creation records more than metadata (level %s, a request or response body, or the value):\n%s", s.name, ev.Level, line)
		}
	}
	if !found {
		t.Errorf("the audit log %s on the control plane has no event for `kubectl create secret generic %s`:\n%s", log, s.name, out)
		return
	}
	t.Logf("audit log: the creation of Secret %s by kubernetes-admin is recorded, metadata only", s.name)
}

// checkPodSecurityRefuses: a privileged pod that mounts the host's root
// is refused in default by Pod Security admission at baseline.
func checkPodSecurityRefuses(t *testing.T, ssh *sshClient) {
	t.Helper()
	pod := `apiVersion: v1
kind: Pod
metadata: {name: e2e-privileged}
spec:
  containers:
    - name: root
      image: registry.k8s.io/pause:3.10.2
      securityContext: {privileged: true}
      volumeMounts: [{name: host, mountPath: /host}]
  volumes:
    - name: host
      hostPath: {path: /}
`
	out, err := ssh.read("cat > /tmp/e2e-privileged.yaml <<'EOF'\n" + pod + "EOF\nkubectl apply -f /tmp/e2e-privileged.yaml")
	if err == nil {
		_, _ = ssh.read("kubectl delete pod e2e-privileged --wait=false")
		t.Errorf("a privileged pod with hostPath / was admitted in default; Pod Security should enforce baseline:\n%s", out)
		return
	}
	for _, want := range []string{`violates PodSecurity "baseline:latest"`, "privileged", "hostPath volumes"} {
		if !strings.Contains(out, want) {
			t.Errorf("the privileged pod was refused, but not by Pod Security at baseline (no %q in the answer):\n%s", want, out)
		}
	}
	if got, _ := ssh.read("kubectl get pod e2e-privileged -o name"); strings.Contains(got, "pod/e2e-privileged") {
		t.Errorf("the refused pod exists: %s", got)
	}
	t.Logf("Pod Security refused the privileged pod: %s", strings.TrimSpace(out))
}

// checkCISBenchmark runs the CIS Kubernetes Benchmark's checks on a node
// (firstboot cis-benchmark, docs/security.md): every check passes or is
// not applicable for the reason the docs give.
func checkCISBenchmark(t *testing.T, ssh *sshClient, node string, role cisbench.Role) {
	t.Helper()
	// The report first, then (on a fail) firstboot's error line.
	out, runErr := ssh.sudoTry("firstboot cis-benchmark --json")
	var r cisbench.Report
	require.NoError(t, json.NewDecoder(strings.NewReader(out)).Decode(&r), "the report of %s:\n%s", node, out)
	var table strings.Builder
	require.NoError(t, r.Write(&table))
	t.Logf("%s:\n%s", node, table.String())
	assert.Equal(t, role, r.Role, node)
	assert.Zero(t, r.Count(cisbench.Fail), "%s fails checks of the benchmark", node)
	assert.Equal(t, r.Count(cisbench.Fail) > 0, runErr != nil, "its exit status says whether a check failed: %v", runErr)
}

// checkNodeHardening checks, on the control plane, what the CIS
// benchmark asks of the nodes (docs/security.md): every kubelet serves
// with a certificate of the cluster CA that a control plane approved
// (the API server checks it: `kubectl logs` of the worker's pod works),
// the worker carries its role label, etcd runs as its own user over a
// data directory only it reads, kubeadm's files are root's alone, and the
// kernel settings the kubelet protects are set.
func checkNodeHardening(t *testing.T, ssh *sshClient, cp, worker string) {
	t.Helper()
	csrs := ssh.output(`kubectl get csr -o jsonpath='{range .items[?(@.spec.signerName=="kubernetes.io/kubelet-serving")]}{.spec.username} {.status.conditions[0].type} {.status.certificate}{"\n"}{end}' | cut -c1-80; echo end`, regexp.MustCompile(`end\s*$`))
	for _, n := range []string{cp, worker} {
		if !regexp.MustCompile(`system:node:` + n + ` Approved \S`).MatchString(csrs) {
			t.Errorf("%s's kubelet has no approved and issued serving certificate:\n%s", n, csrs)
		}
	}
	if out, err := ssh.read("kubectl logs pod/echo --tail=1"); err != nil {
		t.Errorf("kubectl logs of a pod on %s (the API server checks its kubelet's serving certificate against the cluster CA): %v\n%s", worker, err, out)
	}
	workers, err := ssh.read("kubectl get nodes -l node-role.kubernetes.io/worker -o name")
	if err != nil || !strings.Contains(workers, "node/"+worker) || strings.Contains(workers, "node/"+cp+"\n") {
		t.Errorf("the nodes labelled node-role.kubernetes.io/worker are %q (%v); want %s and not %s", workers, err, worker, cp)
	}
	checks := []struct{ cmd, want string }{
		{"ps -o user= -C etcd", "etcd"},
		{"stat -c '%a %U:%G' /var/lib/etcd", "700 etcd:etcd"},
		{"stat -c '%a %U:%G' /etc/kubernetes/pki/etcd/server.key", "600 root:root"},
		{"stat -c '%a %U:%G' /etc/terrarium/etcd-pki /etc/terrarium/etcd-pki/server.key | tr '\\n' ' '", "700 etcd:etcd 600 etcd:etcd"},
		{"stat -c '%a %U' /etc/kubernetes/admin.conf", "600 root"},
		{"stat -c '%a %U' /etc/kubernetes/manifests/kube-apiserver.yaml", "600 root"},
		{"stat -c '%a %U' /etc/kubernetes/pki/ca.crt", "600 root"},
		{"stat -c '%a %U' /var/lib/kubelet/config.yaml", "600 root"},
		{"stat -c '%a %U' /usr/lib/systemd/system/kubelet.service", "600 root"},
		{"sysctl -n vm.overcommit_memory vm.panic_on_oom kernel.panic_on_oops kernel.keys.root_maxkeys | tr '\\n' ' '", "1 0 1 1000000"},
	}
	for _, c := range checks {
		out, err := ssh.sudoTry(c.cmd)
		if err != nil || strings.TrimSpace(out) != c.want {
			t.Errorf("on %s, %s: got %q (%v), want %q", cp, c.cmd, strings.TrimSpace(out), err, c.want)
		}
	}
	t.Logf("node hardening on %s: serving certificates approved, %s labelled worker, etcd as etcd, kubeadm's files 600", cp, worker)
}
