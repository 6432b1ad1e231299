package kubeadmflow

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// A worker's own preflight fails on each state kubeadm's join preflight
// fails on, naming kubeadm's check, and reports a check the config ignores
// as a warning instead.
func TestWorkerPreflight(t *testing.T) {
	// A port this test holds stands for a running kubelet's.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	write := func(f *Flow, p, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(p)), 0o755))
		require.NoError(t, os.WriteFile(f.Path(p), []byte(content), 0o644))
	}
	healthy := func(f *Flow) {
		write(f, "/proc/sys/net/ipv4/ip_forward", "1\n")
		write(f, "/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
		write(f, "/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
	}
	for _, tc := range []struct {
		name   string
		broken func(f *Flow)
		port   bool // the kubelet's port taken
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
		{name: "kubelet port taken", broken: func(*Flow) {}, port: true, want: "[ERROR Port-10250]: port"},
		{name: "ignored by name", broken: func(f *Flow) { write(f, "/proc/sys/net/ipv4/ip_forward", "0\n") }, ignore: []string{"filecontent--proc-sys-net-ipv4-ip_forward"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testFlow(t, nil)
			var warnings []string
			f.Report = host.ReporterFunc(func(step, result, detail string) {
				if step == stepNodePreflight && result == "warning" {
					warnings = append(warnings, detail)
				}
			})
			healthy(f)
			tc.broken(f)
			port := freePort(t)
			if tc.port {
				port = busyPort
			}
			c := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker, IgnorePreflightErrors: tc.ignore}}
			err := runChecks(f, c, workerChecks(port))
			if tc.want == "" {
				require.NoError(t, err)
				if tc.ignore != nil {
					assert.Len(t, warnings, 1, "the ignored check is reported")
				}
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "cluster.ignorePreflightErrors", "the message says how to let it pass")
			assert.Empty(t, warnings)
		})
	}
}

// A worker runs its own preflight, after the container runtime answers and
// before its kubelet starts, and no kubeadm preflight.
func TestWorkerStepsSkipKubeadmPreflight(t *testing.T) {
	var names []string
	for _, s := range steps(&machineconfig.Cluster{Role: machineconfig.RoleWorker}) {
		assert.NotContains(t, s.name, "phase preflight")
		names = append(names, s.name)
	}
	own := slices.Index(names, stepNodePreflight)
	require.GreaterOrEqual(t, own, 0, "steps: %v", names)
	assert.Less(t, slices.Index(names, stepRuntime), own)
	assert.Less(t, own, slices.Index(names, "join phase kubelet-start"))
}

// freePort is a port no one listens on (as far as the test can tell).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
