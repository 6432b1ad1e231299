package kubeadmflow

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// A worker's own preflight fails on each state kubeadm's join preflight
// fails on, naming kubeadm's check, and reports a check the config ignores
// as a warning instead.
func TestWorkerPreflight(t *testing.T) {
	// A port this test holds stands for a running kubelet's.
	busyPort := heldPort(t)
	write := writeFileIn(t)
	healthy := healthyHost(t)
	for _, tc := range []struct {
		name   string
		broken func(f *Flow)
		port   int // a port of kubeadm's taken (the kubelet's); 0 none
		ignore []string
		want   string // the failed check; "" passes
	}{
		{name: "a fresh node", broken: func(*Flow) {}},
		{name: "kubelet.conf left", broken: func(f *Flow) { write(f, KubeletKubeconfig, "x") }, want: "[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists"},
		{name: "token credential left", broken: func(f *Flow) { write(f, BootstrapKubeconfig, "x") }, want: "FileAvailable--etc-kubernetes-bootstrap-kubelet.conf"},
		{name: "CA left", broken: func(f *Flow) { write(f, KubernetesPKIDir+"/ca.crt", "x") }, want: "FileAvailable--etc-kubernetes-pki-ca.crt"},
		{name: "forwarding off", broken: func(f *Flow) { write(f, "/proc/sys/net/ipv4/ip_forward", "0\n") }, want: "[ERROR FileContent--proc-sys-net-ipv4-ip_forward]: /proc/sys/net/ipv4/ip_forward contents are not set to 1"},
		{name: "bridge netfilter missing", broken: func(f *Flow) { require.NoError(t, os.Remove(f.Path("/proc/sys/net/bridge/bridge-nf-call-iptables"))) }, want: "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"},
		{name: "swap on", broken: func(f *Flow) {
			write(f, "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/dev/vda3\tpartition\t1048572\t0\t-2\n")
		}, want: "[ERROR Swap]: swap is on: /dev/vda3"},
		{name: "kubelet port taken", broken: func(*Flow) {}, port: defaultKubeletPort, want: "[ERROR Port-10250]: port"},
		{name: "ignored by name", broken: func(f *Flow) { write(f, "/proc/sys/net/ipv4/ip_forward", "0\n") }, ignore: []string{"filecontent--proc-sys-net-ipv4-ip_forward"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, warnings := preflightFlow(t)
			healthy(f)
			tc.broken(f)
			c := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker, IgnorePreflightErrors: tc.ignore}}
			err := runChecks(f, c, workerChecks(testPorts(t, tc.port, busyPort)))
			if tc.want == "" {
				require.NoError(t, err)
				if tc.ignore != nil {
					assert.Len(t, *warnings, 1, "the ignored check is reported")
				}
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "cluster.ignorePreflightErrors", "the message says how to let it pass")
			assert.Empty(t, *warnings)
		})
	}
}

// The init node's own preflight fails on each state kubeadm's init
// preflight fails on that the image does not rule out, naming kubeadm's
// check.
func TestInitPreflight(t *testing.T) {
	busyPort := heldPort(t)
	write := writeFileIn(t)
	kernel := healthyHost(t)
	healthy := func(f *Flow) {
		kernel(f)
		write(f, onlineCPUsFile, "0-1\n")
		write(f, memInfoFile, "MemTotal:        3006704 kB\nMemFree:          120000 kB\n")
		// The CA step kubernetes-pki wrote, and an empty etcd directory
		// (STATE's): both fine.
		write(f, KubernetesPKIDir+"/ca.crt", "x")
		require.NoError(t, os.MkdirAll(f.Path(layout.EtcdDataDir), 0o700))
	}
	for _, tc := range []struct {
		name   string
		broken func(f *Flow)
		port   int // a port of kubeadm's taken; 0 none
		ignore []string
		want   string // the failed check; "" passes
	}{
		{name: "a fresh node", broken: func(*Flow) {}},
		{name: "one CPU", broken: func(f *Flow) { write(f, onlineCPUsFile, "0\n") }, want: "[ERROR NumCPU]: the number of available CPUs 1 is less than the required 2"},
		{name: "one CPU, ignored", broken: func(f *Flow) { write(f, onlineCPUsFile, "0\n") }, ignore: []string{"NumCPU"}},
		{name: "CPUs listed in ranges", broken: func(f *Flow) { write(f, onlineCPUsFile, "0,2-3\n") }},
		{name: "a bad CPU list", broken: func(f *Flow) { write(f, onlineCPUsFile, "zero\n") }, want: "[ERROR NumCPU]"},
		{name: "1 GiB of memory", broken: func(f *Flow) { write(f, memInfoFile, "MemTotal:        1048576 kB\n") }, want: "[ERROR Mem]: the system RAM (1024 MB) is less than the minimum 1700 MB"},
		{name: "API port taken", port: machineconfig.APIServerPort, want: "[ERROR Port-6443]: port 6443 is in use"},
		{name: "etcd peer port taken", port: etcdPeerPort, want: "[ERROR Port-2380]"},
		{name: "kubelet port taken", port: defaultKubeletPort, want: "[ERROR Port-10250]"},
		{name: "a manifest left", broken: func(f *Flow) { write(f, staticPodManifestsDir+"/kube-apiserver.yaml", "x") }, want: "[ERROR FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]: /etc/kubernetes/manifests/kube-apiserver.yaml already exists"},
		{name: "etcd data left", broken: func(f *Flow) { write(f, layout.EtcdDataDir+"/member/snap/db", "x") }, want: "[ERROR DirAvailable--var-lib-etcd]: /var/lib/etcd is not empty"},
		{name: "forwarding off", broken: func(f *Flow) { write(f, "/proc/sys/net/ipv4/ip_forward", "0\n") }, want: "FileContent--proc-sys-net-ipv4-ip_forward"},
		{name: "swap on", broken: func(f *Flow) {
			write(f, "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/dev/vda3\tpartition\t1048572\t0\t-2\n")
		}, want: "[ERROR Swap]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, warnings := preflightFlow(t)
			healthy(f)
			if tc.broken != nil {
				tc.broken(f)
			}
			c := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleInit, IgnorePreflightErrors: tc.ignore}}
			err := runChecks(f, c, initChecks(testPorts(t, tc.port, busyPort)))
			if tc.want == "" {
				require.NoError(t, err)
				assert.Len(t, *warnings, len(tc.ignore), "an ignored check is reported")
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "cluster.ignorePreflightErrors", "the message says how to let it pass")
		})
	}
}

// A worker and the init node run their own preflight, after the container
// runtime answers and before their kubelet starts, and no kubeadm
// preflight; a joining control plane keeps kubeadm's.
func TestNodeStepsSkipKubeadmPreflight(t *testing.T) {
	for role, kubeletStart := range map[string]string{
		machineconfig.RoleWorker: stepKubeletStart,
		machineconfig.RoleInit:   "init phase kubelet-start",
	} {
		var names []string
		for _, s := range steps(&machineconfig.Cluster{Role: role}) {
			assert.NotContains(t, s.name, "phase preflight", role)
			names = append(names, s.name)
		}
		own := slices.Index(names, stepNodePreflight)
		require.GreaterOrEqual(t, own, 0, "%s steps: %v", role, names)
		assert.Less(t, slices.Index(names, stepRuntime), own, role)
		assert.Less(t, own, slices.Index(names, kubeletStart), role)
	}
	var names []string
	for _, s := range steps(&machineconfig.Cluster{Role: machineconfig.RoleControlPlane}) {
		names = append(names, s.name)
	}
	assert.Contains(t, names, "join phase preflight")
}

// preflightFlow is a flow whose preflight warnings are collected.
func preflightFlow(t *testing.T) (*Flow, *[]string) {
	f := testFlow(t, nil)
	var warnings []string
	f.Report = host.ReporterFunc(func(name string, result step.Result, detail string) {
		if name == stepNodePreflight && result == step.Warning {
			warnings = append(warnings, detail)
		}
	})
	return f, &warnings
}

// heldPort is a port the test listens on until it ends: a port in use.
func heldPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// writeFileIn writes a file under a flow's root.
func writeFileIn(t *testing.T) func(f *Flow, p, content string) {
	return func(f *Flow, p, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(p)), 0o755))
		require.NoError(t, os.WriteFile(f.Path(p), []byte(content), 0o644))
	}
}

// healthyHost sets the kernel as step kubernetes-host leaves it: forwarding
// and bridge netfilter on, no swap.
func healthyHost(t *testing.T) func(f *Flow) {
	write := writeFileIn(t)
	return func(f *Flow) {
		write(f, "/proc/sys/net/ipv4/ip_forward", "1\n")
		write(f, "/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
		write(f, "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
	}
}

// testPorts maps kubeadm's ports to a free one, and taken (unless 0) to
// busy, a port the test holds.
func testPorts(t *testing.T, taken, busy int) listenOn {
	t.Helper()
	free := freePort(t)
	return func(port int) int {
		if taken != 0 && port == taken {
			return busy
		}
		return free
	}
}

// freePort is a port no one listens on (as far as the test can tell).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
