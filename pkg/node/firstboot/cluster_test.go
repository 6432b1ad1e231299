package firstboot

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/cluster/clusterconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// clusterConfig is a real node's config from clusterconfig, in a cluster
// of one control plane (cp-1) and one worker (w-1).
func clusterConfig(t *testing.T, node string) string {
	return clusterConfigWith(t, node, 1)
}

// clusterConfigWith is a node's config in a cluster of controlPlanes
// control planes (cp-1 at 10.77.0.10, cp-2 at .11, ...) and a worker.
func clusterConfigWith(t *testing.T, node string, controlPlanes int, edits ...func(*clusterconfig.Topology)) string {
	t.Helper()
	dir := t.TempDir()
	var cps []clusterconfig.Node
	for i := range controlPlanes {
		cps = append(cps, clusterconfig.Node{Hostname: fmt.Sprintf("cp-%d", i+1), IP: netip.AddrFrom4([4]byte{10, 77, 0, byte(10 + i)})})
	}
	topo := clusterconfig.Topology{
		ControlPlanes: cps,
		Workers:       []clusterconfig.Node{{Hostname: "w-1", IP: netip.MustParseAddr("10.77.0.20")}},
		PrefixLength:  24, Interface: "en*",
	}
	for _, edit := range edits {
		edit(&topo)
	}
	_, err := clusterconfig.Write(clusterconfig.WriteOptions{
		Topology:    topo,
		ClusterName: "lab", SecretsPath: filepath.Join(dir, "s.yaml"), OutDir: dir, TokenTTL: 24 * time.Hour, Now: time.Now().UTC().Truncate(time.Second),
	})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, node+".yaml"))
	require.NoError(t, err)
	return string(b)
}

// testBundle is the slot's bundle of clusterEnv: the Kubernetes bundle's
// images and an application's.
var testBundle = []string{
	"registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-controller-manager:v1.36.3",
	"registry.k8s.io/kube-scheduler:v1.36.3", "registry.k8s.io/kube-proxy:v1.36.3", "registry.k8s.io/etcd:3.6.8-0",
	"registry.k8s.io/coredns/coredns:v1.14.2", "registry.k8s.io/pause:3.10.2", "docker.io/flannel/flannel:v0.28.10",
	"docker.io/library/hello:1.0",
}

// clusterEnv is a fake machine with a Kubernetes bundle, a fake kubeadm
// that prints the bundle's version, and a fake API (env.host) that reports
// both nodes Ready. failOnce makes one kubeadm phase fail on its first run.
func clusterEnv(t *testing.T, failOnce string) (*env, func() []string) {
	e := newEnv(t)
	var manifests []string
	for _, ref := range testBundle {
		manifests = append(manifests, `{"annotations":{"io.containerd.image.name":"`+ref+`"}}`)
	}
	e.write(layout.BundleDir+"/index.json", `{"manifests":[`+strings.Join(manifests, ",")+`]}`)
	e.write(kubeadmflow.AdminKubeconfig, "admin kubeconfig\n")
	var kubeadm []string
	failed := false
	inner := e.exec
	exec := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if _, err := inner(ctx, name, args...); err != nil {
			return nil, err
		}
		line := strings.Join(args, " ")
		switch {
		case name == "systemctl" && line == "restart kubelet.service" && e.exists(kubeadmflow.BootstrapKubeconfig):
			// A worker's kubelet, started with the token credential
			// (kubeletStart), ends its TLS bootstrap with a client
			// certificate.
			e.write(kubeadmflow.KubeletKubeconfig, "kubelet kubeconfig\n")
			e.write(kubeadmflow.KubeletClientCert, "client certificate\n")
		case name == "kubeadm" && line == "version -o short":
			return []byte("v1.36.3\n"), nil
		case name == "kubeadm":
			// The static pods, as kubeadm's etcd and control-plane
			// phases write them.
			staticPods := func(names ...string) {
				for _, m := range names {
					e.write("/etc/kubernetes/manifests/"+m+".yaml", "static pod\n")
				}
			}
			if skip, ok := strings.CutPrefix(line, "init --skip-phases="); ok {
				// One kubeadm init for several phases: recorded as the
				// phases it runs.
				for _, p := range initPhasesRun(strings.Fields(skip)[0]) {
					kubeadm = append(kubeadm, "init phase "+strings.ReplaceAll(p, "/", " "))
					if c, ok := strings.CutPrefix(p, "control-plane/"); ok {
						staticPods("kube-" + c)
					}
				}
				break
			}
			kubeadm = append(kubeadm, strings.SplitN(line, " --", 2)[0])
			switch {
			case strings.HasPrefix(line, "init phase etcd local "), strings.HasPrefix(line, "join phase etcd-join "):
				staticPods("etcd")
			case strings.HasPrefix(line, "join phase control-plane-prepare control-plane "):
				staticPods("kube-apiserver", "kube-controller-manager", "kube-scheduler")
			case strings.HasPrefix(line, "init phase control-plane "):
				staticPods("kube-" + strings.Fields(line)[3])
			}
			if strings.HasPrefix(line, "init phase kubeconfig all ") || strings.HasPrefix(line, "join phase control-plane-prepare kubeconfig ") {
				e.write(kubeadmflow.KubeletKubeconfig, "kubelet kubeconfig\n")
			}
			if strings.HasPrefix(line, "join phase kubelet-start ") { // a joining control plane's
				// The kubelet starts with the token credential and
				// ends its TLS bootstrap with a client certificate.
				e.write(kubeadmflow.BootstrapKubeconfig, "bootstrap token kubeconfig\n")
				e.write(kubeadmflow.KubeletKubeconfig, "kubelet kubeconfig\n")
				e.write(kubeadmflow.KubeletClientCert, "client certificate\n")
			}
			if failOnce != "" && strings.HasPrefix(line, failOnce) && !failed {
				failed = true
				return []byte("simulated power cut\n"), errors.New("exit status 1")
			}
		}
		return nil, nil
	}
	e.hostExec = exec
	return e, func() []string { return kubeadm }
}

// initPhasesRun is what `kubeadm init --skip-phases=skip` runs: kubeadm
// v1.36's init phases (cmd/kubeadm/app/cmd/init.go) but skip, the
// control-plane phase by its subphases.
func initPhasesRun(skip string) []string {
	skipped := strings.Split(skip, ",")
	var ran []string
	for _, p := range []string{"preflight", "certs", "kubeconfig", "etcd", "control-plane", "kubelet-start",
		"wait-control-plane", "upload-config", "upload-certs", "mark-control-plane", "bootstrap-token",
		"kubelet-finalize", "addon", "show-join-command"} {
		switch {
		case slices.Contains(skipped, p):
		case p == "control-plane":
			for _, sub := range []string{"apiserver", "controller-manager", "scheduler"} {
				if !slices.Contains(skipped, p+"/"+sub) {
					ran = append(ran, p+"/"+sub)
				}
			}
		default:
			ran = append(ran, p)
		}
	}
	return ran
}

// The init node's merged kubeadm steps (kubeadmflow).
const (
	stepJoinable = "init phases control-plane … bootstrap-token"
	stepAddons   = "init phases kubelet-finalize, addon"
)

func TestInitNodeRunsKubeadmPhasesInOrder(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfig(t, "cp-1")), e.console.String())
	got := strings.Join(kubeadm(), "\n")
	for _, want := range []string{"init phase certs all", "init phase etcd local", "init phase kubelet-start",
		"init phase bootstrap-token", "init phase addon"} {
		assert.Contains(t, got, want, "kubeadm never ran it")
	}
	cmds := strings.Join(e.commands(), "\n")
	// A node that runs kubeadm checks it is the bundle's version first.
	assert.Less(t, strings.Index(cmds, "kubeadm version -o short"), strings.Index(cmds, "init phase certs all"), "kubeadm's version checked before its first phase")
	assert.NotEqual(t, -1, strings.Index(cmds, "kubeadm version -o short"), "kubeadm's version never checked")
	assert.Contains(t, cmds, "api-apply as terrarium ConfigMap kube-system/coredns", "CoreDNS's configuration never applied")
	// The init node's preflight is its own (step "node preflight").
	assert.NotContains(t, got, "phase preflight", "the init node ran kubeadm's preflight")
	assert.Contains(t, e.console.String(), "node preflight: done")
	assert.Less(t, strings.Index(got, "certs all"), strings.Index(got, "etcd local"), "phases out of order")
	// kube-apiserver's static pod before the kubelet starts, the
	// controller manager's and the scheduler's once the API is ready.
	assert.NotContains(t, got, "control-plane all")
	order := []string{"init phase etcd local", "init phase control-plane apiserver", "init phase kubelet-start",
		"init phase control-plane controller-manager", "init phase control-plane scheduler", "init phase upload-config",
		"init phase mark-control-plane", "init phase bootstrap-token", "init phase kubelet-finalize", "init phase addon"}
	for i := 1; i < len(order); i++ {
		assert.Less(t, strings.Index(got, order[i-1]), strings.Index(got, order[i]), "%s before %s", order[i-1], order[i])
	}
	// After the API is ready, two kubeadm processes.
	n := 0
	for _, c := range e.commands() {
		if strings.HasPrefix(c, "kubeadm init --skip-phases=") {
			n++
		}
	}
	assert.Equal(t, 2, n, "kubeadm init runs:\n%s", cmds)
	// The controller manager after the API is ready; the pod network
	// once the admin may write (after upload-config, and the cluster
	// joinable), before the add-ons: no node is Ready without it.
	console := e.console.String()
	at := func(line string) int {
		i := strings.Index(console, line)
		require.NotEqual(t, -1, i, "no %q on the console:\n%s", line, console)
		return i
	}
	assert.Less(t, at("wait for the control plane: done"), at(stepJoinable+": started"))
	assert.Less(t, at(stepJoinable+": done"), at("pod network (flannel): started"))
	assert.Less(t, at("pod network (flannel): done"), at(stepAddons+": started"))
	assert.Less(t, at("cluster DNS configuration: done"), at(stepAddons+": started"))
	assert.Contains(t, cmds, "api-apply as terrarium Namespace kube-flannel", "flannel never applied")
	// PKI pre-seeded, keys owner-only; kubeadm's config pinned to the bundle.
	assert.Equal(t, os.FileMode(0o600), mode(t, e.path(kubeadmflow.KubernetesPKIDir+"/ca.key")), "ca.key mode")
	assert.Equal(t, os.FileMode(0o700), mode(t, e.path(kubeadmflow.KubernetesPKIDir)), "pki dir mode")
	assert.Equal(t, os.FileMode(0o600), mode(t, e.path(kubeadmflow.KubernetesPKIDir+"/ca.crt")), "ca.crt mode")
	// kube-apiserver's files before kubeadm runs, root's alone: the
	// config of `imagebuild config cluster` holds a key, so Secrets are
	// encrypted.
	for _, f := range []string{layout.EncryptionConfigFile, layout.AuditPolicyFile, layout.AdmissionConfigFile} {
		assert.Equal(t, os.FileMode(0o600), mode(t, e.path(f)), "%s mode", f)
	}
	assert.Equal(t, os.FileMode(0o700), mode(t, e.path(layout.AuditLogDir)), "audit log dir mode")
	assert.NotContains(t, console, kubeadmflow.NoEncryptionKey)
	cfg := e.read(kubeadmflow.KubeadmConfigFile)
	for _, want := range []string{`kubernetesVersion: "v1.36.3"`, `controlPlaneEndpoint: "127.0.0.1:7445"`, `advertiseAddress: "10.77.0.10"`} {
		assert.Contains(t, cfg, want, "kubeadm.yaml")
	}
	// The control plane's probes are patched, and kubeadm is told where.
	assert.Contains(t, cfg, `directory: "`+kubeadmconfig.PatchesDir+`"`, "kubeadm.yaml does not point at the patches")
	for name, want := range kubeadmconfig.Patches(kubeadmconfig.EtcdUser{UID: 232, GID: 232}) {
		assert.Equal(t, string(want), e.read(filepath.Join(kubeadmconfig.PatchesDir, name)), "patch %s", name)
		assert.Equal(t, os.FileMode(0o600), mode(t, e.path(filepath.Join(kubeadmconfig.PatchesDir, name))), "patch %s mode", name)
	}
	assert.Contains(t, cfg, `{name: encryption-provider-config, value: "`+layout.EncryptionConfigFile+`"}`)
	assert.Contains(t, e.read("/etc/terrarium/apilb.json"), `"10.77.0.10:6443"`)
	st := e.status()
	require.NotNil(t, st.Cluster)
	assert.Equal(t, "init", st.Cluster.Role)
	assert.Equal(t, "2/2 nodes Ready", st.Cluster.Nodes)
	assert.Equal(t, kubeadmflow.AdminKubeconfig, st.Cluster.AdminKubeconfig)
	// Once the cluster is joinable, the init node signs kubelets' client
	// certificates itself, as the admin with the cluster CA.
	assert.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.csrSigners) == 1
	}, 10*time.Second, time.Millisecond, "no kubelet CSR signer started")
	e.mu.Lock()
	assert.Equal(t, []string{kubeadmflow.AdminKubeconfig + " " + kubeadmflow.KubernetesPKIDir}, e.csrSigners)
	e.mu.Unlock()
}

// The init node records each add-on as its step applies it: the
// cluster-addons phase then finds nothing to do, at formation and at the
// next boot; a cluster formed before the record gets every add-on once.
func TestInitNodeRecordsAddons(t *testing.T) {
	e, _ := clusterEnv(t, "")
	cfg := clusterConfig(t, "cp-1")
	require.NoError(t, e.run(cfg), e.console.String())
	record, ok := e.configMaps.get(kubeadmflow.AddonsRecordNamespace + "/" + kubeadmflow.AddonsRecordName)
	require.True(t, ok, "no add-ons record")
	assert.Contains(t, record, "pod-network")
	assert.Contains(t, record, "cluster-dns")
	assert.Contains(t, record, "upgrade-coordination")
	assert.NotContains(t, e.console.String(), "add-on pod-network: started", "applied twice at formation")
	applies := func() int {
		n := 0
		for _, c := range e.commands() {
			if strings.HasPrefix(c, "api-apply as terrarium ") {
				n++
			}
		}
		return n
	}
	formed := applies()
	require.NoError(t, e.run(cfg), e.console.String())
	assert.Equal(t, formed, applies(), "the next boot applied add-ons again")

	// The record lost (a cluster formed before it): every add-on again.
	e.configMaps = fakeConfigMaps{}
	require.NoError(t, e.run(cfg), e.console.String())
	assert.Contains(t, e.console.String(), "add-on pod-network: started")
	assert.Greater(t, applies(), formed)
	_, ok = e.configMaps.get(kubeadmflow.AddonsRecordNamespace + "/" + kubeadmflow.AddonsRecordName)
	assert.True(t, ok, "recorded again")
}

// A power cut in the middle: the next run resumes at the step that did
// not complete, and does not redo the ones that did.
func TestInitNodeResumesAfterFailure(t *testing.T) {
	e, kubeadm := clusterEnv(t, "init phase etcd local")
	e.retryAttempts(1)
	cfg := clusterConfig(t, "cp-1")
	require.Error(t, e.run(cfg), "Run succeeded although a phase failed")
	first := len(kubeadm())
	require.NoError(t, e.run(cfg), "second Run\n%s", e.console.String())
	resumed := kubeadm()[first:]
	require.NotEmpty(t, resumed)
	assert.Equal(t, "init phase etcd local", resumed[0], "the second run starts with the failed etcd phase")
	assert.NotContains(t, resumed, "init phase certs all", "the second run redoes nothing done")
}

func TestWorkerJoins(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfig(t, "w-1")), e.console.String())
	// Its time follows the control plane, synced after the cluster's
	// host files and before its first certificate check (the API's);
	// the banner says so.
	assert.Equal(t, "10.77.0.10 (stratum 9), offset -0.000012 s", e.status().Time)
	console := e.console.String()
	assert.Contains(t, console, "time: synced: 10.77.0.10")
	assert.Less(t, strings.Index(console, "kubernetes-host"), strings.Index(console, "time: synced"))
	assert.Less(t, strings.Index(console, "time: synced"), strings.Index(console, "wait for the API"))
	assert.Contains(t, e.read(timesync.ConfFile), "server 10.77.0.10 iburst")
	assert.Contains(t, status.Banner(e.status()), "time       10.77.0.10 (stratum 9)")
	// kubeadm's kubelet-start, in process: no kubeadm at all on a worker,
	// not even to ask its version.
	assert.Empty(t, kubeadm(), "a worker runs no kubeadm")
	for _, c := range e.commands() {
		assert.False(t, strings.HasPrefix(c, "kubeadm "), "a worker ran %q", c)
	}
	assert.Contains(t, console, "kubelet start: done")
	cfg := e.read(kubeadmflow.KubeletConfigFile)
	assert.Contains(t, cfg, "kind: KubeletConfiguration", "the cluster's kubelet configuration")
	assert.Contains(t, cfg, "- 10.96.0.10")
	assert.Contains(t, cfg, "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock", "with the node's CRI endpoint")
	assert.Equal(t, "containerRuntimeEndpoint: \"unix:///run/containerd/containerd.sock\"\n", e.read("/var/lib/kubelet/instance-config.yaml"))
	assert.Equal(t, "KUBELET_KUBEADM_ARGS=\"--node-ip=10.77.0.20\"\n", e.read(kubeadmflow.KubeletFlagsFile))
	assert.Contains(t, e.read(kubeadmflow.KubernetesPKIDir+"/ca.crt"), "BEGIN CERTIFICATE")
	assert.False(t, e.exists(kubeadmflow.BootstrapKubeconfig), "the token credential is gone after the TLS bootstrap")
	assert.False(t, e.exists(kubeadmflow.JoinKubeconfig), "the join kubeconfig is gone")
	assert.False(t, e.exists(kubeadmflow.KubernetesPKIDir+"/ca.key"), "a worker got the CA key")
	assert.False(t, e.exists(kubeadmconfig.PatchesDir), "a worker got the control plane's kubeadm patches")
	for _, f := range []string{layout.EncryptionConfigFile, layout.AuditPolicyFile, layout.AdmissionConfigFile} {
		assert.False(t, e.exists(f), "a worker got kube-apiserver's %s", f)
	}
	for _, f := range []string{kubeadmflow.KubeletConfigFile, kubeadmflow.KubeletFlagsFile, kubeadmflow.KubernetesPKIDir + "/ca.crt", kubeadmflow.ClusterCAFile} {
		assert.Equal(t, os.FileMode(0o600), mode(t, e.path(f)), "%s mode", f)
	}
	assert.NotContains(t, e.read(kubeadmflow.KubeadmConfigFile), "patches:", "a worker got the control plane's kubeadm patches")
	assert.Contains(t, console, "kubelet TLS bootstrap: done", "the console does not show the TLS bootstrap step")
	assert.Contains(t, e.read(kubeadmflow.KubeadmConfigFile), "caCertHashes: [\"sha256:", "join config does not pin the CA")
	// A worker reads only its own Node, so it does not claim to know the
	// cluster's count.
	st := e.status()
	require.NotNil(t, st.Cluster)
	assert.Equal(t, "this node Ready", st.Cluster.Nodes)
	e.mu.Lock()
	assert.Empty(t, e.csrSigners, "a worker signs no certificates")
	e.mu.Unlock()
}

// Control planes booted together take turns at etcd-join: while cp-3
// holds the join lock, cp-2 waits (and says so) and runs no etcd-join; once
// cp-3 releases it, cp-2 takes it, joins, and releases it in turn.
func TestControlPlanesJoinEtcdOneAtATime(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	e.nodes = []string{"cp-1", "cp-2", "cp-3", "w-1"}
	e.leases.put(kubeclient.Lease{Namespace: kubeadmflow.JoinLockNamespace, Name: kubeadmflow.JoinLockName, Holder: "cp-3", DurationSeconds: 180})
	// The status published while cp-2 runs etcd-join no longer says it
	// waits.
	var stepDuringJoin atomic.Value
	// From etcd-join until its control plane answers, cp-2 holds the
	// lock: the holder as each of those phases runs.
	var mu sync.Mutex
	holders := map[string]string{}
	inner := e.hostExec
	e.hostExec = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		cmd := strings.Join(args, " ")
		if name == "kubeadm" && strings.HasPrefix(cmd, "join phase etcd-join") {
			if st := e.statusIfAny(); st != nil && st.Cluster != nil {
				stepDuringJoin.Store(st.Cluster.Step)
			}
		}
		for _, phase := range []string{"etcd-join", "control-plane-prepare control-plane", "kubelet-wait-bootstrap", "control-plane-join all"} {
			if name == "kubeadm" && strings.HasPrefix(cmd, "join phase "+phase+" ") {
				l, _ := e.leases.get(kubeadmflow.JoinLockName)
				mu.Lock()
				holders[phase] = l.Holder
				mu.Unlock()
			}
		}
		return inner(ctx, name, args...)
	}
	done := make(chan error, 1)
	go func() { done <- e.run(clusterConfigWith(t, "cp-2", 3)) }()
	waited := func() bool {
		st := e.statusIfAny()
		return st != nil && st.Cluster != nil && st.Cluster.Step == "join phase etcd-join: waiting for cp-3"
	}
	deadline := time.Now().Add(10 * time.Second)
	for !waited() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.True(t, waited(), "cp-2 shows it waits for cp-3; status %+v", e.statusIfAny())
	for _, k := range kubeadm() {
		require.False(t, strings.HasPrefix(k, "join phase etcd-join"), "cp-2 ran etcd-join while cp-3 held the lock")
	}
	held, _ := e.leases.get(kubeadmflow.JoinLockName)
	held.Holder = ""
	_, err := e.leases.swap(held)
	require.NoError(t, err, "release the join lock")
	require.NoError(t, <-done, "Run\n%s", e.console.String())
	assert.Equal(t, "join phase preflight,join phase control-plane-prepare certs,join phase control-plane-prepare kubeconfig,"+
		"join phase kubelet-start,join phase etcd-join,join phase control-plane-prepare control-plane,"+
		"join phase kubelet-wait-bootstrap,join phase control-plane-join all", strings.Join(kubeadm(), ","), "what cp-2 ran")
	mu.Lock()
	assert.Equal(t, "map[control-plane-join all:cp-2 control-plane-prepare control-plane:cp-2 etcd-join:cp-2 kubelet-wait-bootstrap:cp-2]",
		fmt.Sprint(holders), "the join lock's holder as each phase ran: cp-2 from etcd-join to control-plane-join")
	mu.Unlock()
	got, _ := stepDuringJoin.Load().(string)
	assert.Equal(t, "join phase etcd-join", got, "the published step while cp-2 joins etcd")
	l, _ := e.leases.get(kubeadmflow.JoinLockName)
	assert.Empty(t, l.Holder, "the join lock is released after cp-2's join")
	assert.Equal(t, 1, l.Transitions, "after one transition")
	for _, line := range []string{"another control plane is joining etcd: cp-3", "took the join lock kube-system/terrarium-etcd-join"} {
		assert.Contains(t, e.console.String(), line)
	}
}

// A joiner whose bootstrap token expired before it joined: the config is
// refused before anything is applied, and the console says how to make a
// new token. With a usable token (here: the clock set right) it joins.
func TestExpiredTokenAppliesNothing(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	cfg := clusterConfig(t, "w-1")
	e.mu.Lock()
	e.clockNow = time.Now().Add(48 * time.Hour)
	e.mu.Unlock()
	calls := 0
	src := func(ctx context.Context) ([]byte, string, bool, error) {
		calls++
		if calls == 3 {
			assert.False(t, e.exists("/etc/hostname"), "nothing applied with an expired token")
			assert.False(t, e.exists(kubeadmflow.KubeadmConfigFile), "nothing applied with an expired token")
			assert.Empty(t, kubeadm(), "no kubeadm with an expired token")
			s := e.status()
			assert.Equal(t, status.StateConfigInvalid, s.State)
			assert.Contains(t, s.Message, "$.cluster.tokenExpires: the bootstrap token expired")
			e.mu.Lock()
			e.clockNow = time.Now()
			e.mu.Unlock()
		}
		return []byte(cfg), configFrom, true, nil
	}
	require.NoError(t, e.runWith(src), "Run\n%s", e.console.String())
	require.GreaterOrEqual(t, calls, 3, "the config source was polled until the clock was set right: the expired token was refused")
	assert.Contains(t, e.console.String(), "--rotate-token", "the console says how to make a new token")
	assert.Empty(t, kubeadm(), "a worker runs no kubeadm")
	assert.Contains(t, e.console.String(), "kubelet start: done")
}

// Once the token has been used, its expiry does not matter: a joined
// worker and an init node that created the token both verify on a boot
// days later.
func TestExpiredTokenAfterUseIsFine(t *testing.T) {
	for _, node := range []string{"w-1", "cp-1"} {
		t.Run(node, func(t *testing.T) {
			e, _ := clusterEnv(t, "")
			e.mu.Lock()
			e.clockNow = time.Now()
			e.mu.Unlock()
			cfg := clusterConfig(t, node)
			require.NoError(t, e.run(cfg), "first boot\n%s", e.console.String())
			e.setBootID("second-boot")
			e.mu.Lock()
			e.clockNow = time.Now().Add(72 * time.Hour)
			e.mu.Unlock()
			require.NoError(t, e.run(cfg), "boot after the token expired\n%s", e.console.String())
			assert.Equal(t, status.StateVerified, e.status().State, "status after the token expired")
		})
	}
}

// A Ready node is healthy only once its pod network runs: flanneld has
// leased the node's subnet and the flannel and kube-proxy containers run
// (their images may take minutes to unpack after the node is Ready).
func TestNodeWaitsForItsPodNetwork(t *testing.T) {
	e, _ := clusterEnv(t, "")
	require.NoError(t, os.Remove(e.path(kubeadmflow.FlannelSubnetEnv)))
	asked := map[string]int{}
	e.running = func(name string) bool {
		asked[name]++
		if name == "kube-flannel" && asked[name] == 3 {
			e.write(kubeadmflow.FlannelSubnetEnv, "FLANNEL_SUBNET=10.244.1.1/24\n") // flanneld got its lease
		}
		return asked[name] >= 3 && (name != "kube-proxy" || asked[name] >= 5)
	}
	require.NoError(t, e.run(clusterConfig(t, "w-1")), "Run\n%s", e.console.String())
	assert.GreaterOrEqual(t, asked["kube-proxy"], 5, "the wait goes on until kube-proxy runs (the 5th question); asked %v", asked)
	assert.GreaterOrEqual(t, asked["kube-flannel"], 5, "asked %v", asked)
	st := e.status()
	require.NotNil(t, st.Healthy, "status %+v", st)
	assert.True(t, *st.Healthy, "status %+v", st)
}

// A pod network that never comes up fails the health check, naming what
// is missing and where to look, without waiting for it a second time. The
// kubernetes-ready wait that ran out is
// recorded and does not stop the boot: the phases after it run.
func TestPodNetworkNeverUp(t *testing.T) {
	e, _ := clusterEnv(t, "")
	e.running = func(name string) bool { return name != "kube-flannel" }
	err := e.run(clusterConfig(t, "w-1"))
	require.ErrorContains(t, err, "pod network is not", "the pod network's health check fails")
	st := e.status()
	require.NotNil(t, st.Healthy, "status %+v", st)
	require.False(t, *st.Healthy, "healthy without flannel: %+v", st)
	steps := stepResults(e.lastBoot())
	for _, want := range []string{kubeadmflow.PhaseKubernetesReady + "=failed", kubeadmflow.PhaseKubernetesFiles + "=applied", "health=failed"} {
		assert.Contains(t, steps, want)
	}
	assert.Contains(t, e.console.String(), kubeadmflow.PhaseKubernetesReady+": the node is Ready but its pod network is not")
	assert.Contains(t, e.console.String(), "going on, the health check decides")
	assert.NotContains(t, e.console.String(), "health: "+kubeadmflow.PhaseKubernetesReady+": not yet", "the health check does not wait again for a wait that ran out")
	for _, want := range []string{"pod network is not", "no running kube-flannel container", "crictl ps -a"} {
		assert.Contains(t, st.Message, want)
	}
	assert.NotContains(t, st.Message, "no running kube-proxy", "kube-proxy runs: the message does not blame it")
}

// On a later boot a node whose pod network is not up yet is not drifted:
// kubernetes-ready says so, waits, and records "reached"; nothing heals.
func TestVerifyBootWaitsForReadyWithoutHealing(t *testing.T) {
	e, _ := clusterEnv(t, "")
	cfg := clusterConfig(t, "w-1")
	require.NoError(t, e.run(cfg), e.console.String())

	e.setBootID("22222222-2222-2222-2222-222222222222")
	e.console.Reset()
	require.NoError(t, os.Remove(e.path(kubeadmflow.FlannelSubnetEnv)), "a fresh boot: flanneld has no lease yet")
	asked := 0
	e.running = func(name string) bool {
		if name == "kube-flannel" {
			asked++
			if asked == 3 {
				e.write(kubeadmflow.FlannelSubnetEnv, "FLANNEL_SUBNET=10.244.1.1/24\n")
			}
			return asked >= 3
		}
		return true
	}
	require.NoError(t, e.run(cfg), e.console.String())

	steps := stepResults(e.lastBoot())
	assert.Contains(t, steps, kubeadmflow.PhaseKubernetesReady+"=reached")
	assert.Contains(t, steps, kubeadmflow.PhaseKubernetes+"=verified", "the kubeadm steps' results are there: nothing to heal")
	for _, s := range steps {
		assert.NotContains(t, s, "=healed")
	}
	console := e.console.String()
	assert.Contains(t, console, kubeadmflow.PhaseKubernetesReady+": not yet (node w-1 is Ready but its pod network is not: no running kube-flannel container")
	assert.NotContains(t, console, "drifted")
	assert.GreaterOrEqual(t, asked, 3, "waited until flannel ran")
}

// `firstboot run --phase kubernetes/STEP` runs one kubeadm step of a
// formed node's role again, alone, and records it; a step the role has
// not is refused with the role's steps, and nothing runs.
func TestRunOneKubeadmStep(t *testing.T) {
	e, kubeadm := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfigWith(t, "cp-1", 1)), e.console.String())
	formed := len(kubeadm())
	e.resetCommands()
	o := e.optionsWith(noStick())

	before := e.read(status.File)
	require.NoError(t, RunPhase(context.Background(), o, "kubernetes/init-phase-kubeconfig-all"))
	assert.Equal(t, []string{"init phase kubeconfig all"}, kubeadm()[formed:], "that step alone")
	assert.Equal(t, before, e.read(status.File), "status.json is the service's: the command leaves it")
	assert.Contains(t, stepResults(e.lastBoot()), "kubernetes/init-phase-kubeconfig-all=applied")

	err := RunPhase(context.Background(), o, "kubernetes/join-phase-etcd-join")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no kubeadm step "join-phase-etcd-join" on a node of role init`)
	assert.Contains(t, err.Error(), "init-phase-certs-all, init-phase-kubeconfig-all")
	assert.Len(t, kubeadm(), formed+1, "nothing more ran")

	err = RunPhase(context.Background(), o, "kubernets")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "and each kubeadm step alone, kubernetes/STEP: container-runtime, ")
}
