package kubeadmflow

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/cri"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// fastTiming polls and retries at once.
var fastTiming = Timing{APIPoll: time.Millisecond, FilePoll: time.Millisecond, StepRetry: time.Millisecond, StepAttempts: 3}

// noRuntime fails every question: the tests here never reach containerd.
type noRuntime struct{}

func (noRuntime) Check(context.Context, string) (cri.Info, error) {
	return cri.Info{}, fmt.Errorf("no runtime in this test")
}
func (noRuntime) Pull(context.Context, string, string) (bool, error) {
	return false, fmt.Errorf("no runtime in this test")
}
func (noRuntime) Running(context.Context, string, string) (bool, error) {
	return false, fmt.Errorf("no runtime in this test")
}

// testFlow is a flow on a temporary root with a node state, the real HTTPS
// probe unless probe is given, and no API.
func testFlow(t *testing.T, probe func(caPEM string) (ProbeFunc, func())) *Flow {
	t.Helper()
	return testFlowOn(t, host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		return nil, fmt.Errorf("%s: no programs in this test", name)
	}), probe, host.ReporterFunc(func(string, step.Result, string) {}))
}

// testFlowOn is testFlow whose host runs programs with exec and whose
// steps are reported to report.
func testFlowOn(t *testing.T, exec host.Executor, probe func(caPEM string) (ProbeFunc, func()), report host.Reporter) *Flow {
	t.Helper()
	h := &host.Host{Root: t.TempDir(), Clock: host.ClockFunc(time.Now), Executor: exec}
	state, err := nodestate.On(h).OpenJournal()
	require.NoError(t, err)
	if probe == nil {
		probe = HTTPSProbe
	}
	noBackups := func(context.Context, func(string) error) (bool, error) { return false, nil }
	d := Deps{Runtime: noRuntime{}, Probe: probe, Timing: fastTiming, Backups: noBackups, VolumeBackups: noBackups, APIVersion: noAPIVersion,
		API: func(string) (APIClient, error) { return nil, fmt.Errorf("no API in this test") }, Volumes: &fakeVolumes{}}
	f, err := New(h, d, state, report, func(func(*ClusterStatus)) {})
	require.NoError(t, err)
	return f
}

func TestNewRefusesMissingDependencies(t *testing.T) {
	f := testFlow(t, nil)
	_, err := New(f.Host, Deps{Timing: fastTiming}, f.State, f.Report, f.Cluster)
	require.Error(t, err)
	for _, name := range []string{"runtime", "API", "API version", "probe", "backups", "volumes", "volume backups"} {
		assert.Contains(t, err.Error(), name)
	}
	d := f.Deps
	d.Timing = Timing{}
	_, err = New(f.Host, d, f.State, f.Report, f.Cluster)
	assert.ErrorContains(t, err, "timing")
	_, err = New(f.Host, f.Deps, nil, f.Report, f.Cluster)
	assert.ErrorContains(t, err, "state")
}

// An API server that answers 403 (just restarted, RBAC not bootstrapped
// yet) or 500 (not ready) is waited for; only 200 is ready.
func TestWaitForReadyzWantsOK(t *testing.T) {
	codes := []int{403, 500, 401, 200}
	calls := 0
	f := testFlow(t, func(caPEM string) (ProbeFunc, func()) {
		return func(ctx context.Context, url string) (int, []byte, error) {
			code := codes[min(calls, len(codes)-1)]
			calls++
			return code, nil, nil
		}, func() {}
	})
	c := &machineconfig.Config{Cluster: &machineconfig.Cluster{CACert: "unused", ControlPlanes: []string{"10.77.0.10"}}}
	require.NoError(t, waitForReadyz(context.Background(), f, c, "10.77.0.10:6443", time.Minute))
	assert.Equal(t, 4, calls, "403, 500 and 401 are not ready")

	codes, calls = []int{403}, 0
	err := waitForReadyz(context.Background(), f, c, "10.77.0.10:6443", 10*time.Millisecond)
	assert.ErrorContains(t, err, "answered 403")
}

// waitForReadyz keeps one connection to the API across its polls (a TLS
// handshake per poll costs a loaded control plane under emulation), and
// trusts only the cluster CA.
func TestWaitForReadyzKeepsItsConnection(t *testing.T) {
	var requests, conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) < 3 {
			http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	c := &machineconfig.Config{Cluster: &machineconfig.Cluster{CACert: ca, ControlPlanes: []string{"127.0.0.1"}}}
	f := testFlow(t, nil)
	endpoint := srv.Listener.Addr().String()
	require.NoError(t, waitForReadyz(context.Background(), f, c, endpoint, time.Minute))
	assert.Equal(t, int32(3), requests.Load(), "requests")
	assert.Equal(t, int32(1), conns.Load(), "connections")

	// Another CA: the API is not trusted.
	c.Cluster.CACert = otherCA(t)
	err := waitForReadyz(context.Background(), f, c, endpoint, 10*time.Millisecond)
	assert.ErrorContains(t, err, "certificate")

	c.Cluster.CACert = "not PEM"
	err = waitForReadyz(context.Background(), f, c, endpoint, 10*time.Millisecond)
	assert.ErrorIs(t, err, errNoCA)
}

// A joining control plane's kubeadm preflight ignores SystemVerification,
// the two CRI checks the container runtime step makes with a longer
// deadline, and the checks the config names, and nothing else. (The init
// node and workers run no kubeadm preflight: TestNodeStepsSkipKubeadmPreflight.)
func TestPreflightIgnoresWhatTheConfigNames(t *testing.T) {
	for _, role := range []string{machineconfig.RoleControlPlane} {
		for _, tt := range []struct {
			ignore []string
			want   string
		}{
			{nil, "--ignore-preflight-errors=SystemVerification,CRI,ContainerRuntimeVersion"},
			{[]string{"NumCPU", "Mem"}, "--ignore-preflight-errors=SystemVerification,CRI,ContainerRuntimeVersion,NumCPU,Mem"},
		} {
			c := &machineconfig.Cluster{Role: role, IgnorePreflightErrors: tt.ignore}
			var flags []string
			for _, s := range steps(c) {
				for _, a := range s.args {
					if strings.HasPrefix(a, "--ignore-preflight-errors") {
						assert.True(t, strings.HasSuffix(s.name, "phase preflight"), "%s: step %q ignores preflight errors", role, s.name)
						flags = append(flags, a)
					}
				}
			}
			assert.True(t, slices.Equal(flags, []string{tt.want}), "%s with ignorePreflightErrors %v: preflight flags %q, want [%s]", role, tt.ignore, flags, tt.want)
		}
	}
}

// TestKubeadmProgressByIdentity: the steps done are in the node state,
// keyed by the node's identity: the same node keeps them, another starts
// again.
func TestKubeadmProgressByIdentity(t *testing.T) {
	f := testFlow(t, nil)
	assert.False(t, tokenUsed(f, machineconfig.RoleWorker))
	p := loadProgress(f, "identity:w")
	assert.Equal(t, &nodestate.KubeadmProgress{Node: "identity:w"}, p)
	require.NoError(t, saveProgress(f, p, stepWaitForAPI))
	assert.True(t, tokenUsed(f, machineconfig.RoleWorker))

	again := loadProgress(f, "identity:w")
	assert.True(t, again.IsDone(stepWaitForAPI))
	require.NoError(t, saveProgress(f, again, "kubelet TLS bootstrap"))
	j, err := nodestate.On(f.Host).ReadJournal()
	require.NoError(t, err)
	require.NotNil(t, j.Kubeadm)
	assert.Equal(t, []string{stepWaitForAPI, "kubelet TLS bootstrap"}, j.Kubeadm.Done)

	other := loadProgress(f, "identity:other")
	assert.Empty(t, other.Done, "another node starts again")
}

// A node's identity is its immutable fields: a rotated token (another
// kubeadm configuration) keeps it, another role or address does not.
func TestNodeIdentity(t *testing.T) {
	c := func(role, ip, token string) *machineconfig.Config {
		return &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{Name: "lab", Role: role, NodeIP: ip, Token: token, CACertHash: "sha256:ab"}}
	}
	base := NodeIdentity(c(machineconfig.RoleWorker, "10.77.0.20", "abcdef.0123456789abcdef"))
	assert.Equal(t, base, NodeIdentity(c(machineconfig.RoleWorker, "10.77.0.20", "fedcba.0123456789abcdef")))
	assert.NotEqual(t, base, NodeIdentity(c(machineconfig.RoleControlPlane, "10.77.0.20", "abcdef.0123456789abcdef")))
	assert.NotEqual(t, base, NodeIdentity(c(machineconfig.RoleWorker, "10.77.0.21", "abcdef.0123456789abcdef")))
}

// otherCA is a self-signed CA certificate that signed nothing.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// The steps that mark the token as used are steps of the roles.
func TestTokenStepsExist(t *testing.T) {
	for role, want := range map[string]string{"init": stepBootstrapToken, "worker": stepWaitForAPI, "controlplane": stepWaitForAPI} {
		var names []string
		for _, st := range steps(&machineconfig.Cluster{Role: role}) {
			names = append(names, st.name)
		}
		assert.Contains(t, names, want, "role %s", role)
	}
}

// A worker waits past a ready API until the init node's bootstrap-token
// step is done (cluster-info readable, not its signature: no kubeadm
// discovery runs on a worker) and its own token reads its Node.
func TestWaitForAPIWorkerJoinable(t *testing.T) {
	answers := []answer{
		{403, []byte(`{"kind":"Status"}`)},
		{200, []byte(`{"data":{}}`)},
		{200, []byte(`{"data":{"kubeconfig":"x"}}`)},
	}
	var asked []string
	f := testFlow(t, clusterInfoAnswers(&asked, answers))
	f.Timing.APIPoll = time.Millisecond
	token := &tokenNodes{errs: []error{&kubeclient.StatusError{Code: 401, Status: "401 Unauthorized"}, &kubeclient.StatusError{Code: 403, Status: "403 Forbidden"}}}
	var kubeconfigs []string
	f.API = func(kubeconfig string) (APIClient, error) {
		kubeconfigs = append(kubeconfigs, kubeconfig)
		return token, nil
	}
	c := &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker, CACert: "unused",
		ControlPlanes: []string{"10.77.0.10"}, Token: "abcdef.0123456789abcdef"}}
	require.NoError(t, waitForAPI(context.Background(), f, c))
	assert.Len(t, asked, 1+len(answers)+2, "readyz once, cluster-info until it holds a kubeconfig, then again while the token is refused: %v", asked)
	assert.Equal(t, 3, token.asked, "the Node asked until the token reads it (not found)")
	assert.Equal(t, []string{JoinKubeconfig}, kubeconfigs, "asked as the node's bootstrap token")
	assert.NoFileExists(t, f.Path(JoinKubeconfig), "the token's kubeconfig is removed after")

	// Never joinable: the reason names the init node's step.
	token.errs = []error{&kubeclient.StatusError{Code: 401, Status: "401 Unauthorized"}}
	token.sticky = true
	err := waitForJoinable(context.Background(), f, c, 5*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bootstrap token cannot read its Node")
	assert.Contains(t, err.Error(), stepBootstrapToken)
}

// answer is a fake API's answer to a GET.
type answer struct {
	code int
	body []byte
}

// clusterInfoAnswers is a probe whose readyz is always ready and whose
// cluster-info answers are answers in turn (the last one for good); asked
// records every URL asked.
func clusterInfoAnswers(asked *[]string, answers []answer) func(caPEM string) (ProbeFunc, func()) {
	return func(string) (ProbeFunc, func()) {
		return func(ctx context.Context, url string) (int, []byte, error) {
			*asked = append(*asked, url)
			if strings.HasSuffix(url, "/readyz") {
				return 200, []byte("ok"), nil
			}
			a := answers[min(len(*asked)-2, len(answers)-1)]
			return a.code, a.body, nil
		}, func() {}
	}
}

// tokenNodes answers Node with errs in turn, then not found (or the last
// error for good when sticky).
type tokenNodes struct {
	oneNode
	errs   []error
	sticky bool
}

func (n *tokenNodes) Node(context.Context, string) (kubeclient.Node, error) {
	n.asked++
	if len(n.errs) > 0 {
		err := n.errs[0]
		if !n.sticky || len(n.errs) > 1 {
			n.errs = n.errs[1:]
		}
		return kubeclient.Node{}, err
	}
	return kubeclient.Node{}, &kubeclient.StatusError{Code: 404, Status: "404 Not Found"}
}

// A joining control plane waits past a ready API until cluster-info is
// signed for its own token (kubeadm's discovery needs the signature): not
// readable yet (403), unsigned, signed for another token.
func TestWaitForAPIWaitsForClusterInfo(t *testing.T) {
	signed := func(id string) []byte {
		return []byte(`{"data":{"kubeconfig":"x","jws-kubeconfig-` + id + `":"sig"}}`)
	}
	answers := []answer{
		{403, []byte(`{"kind":"Status"}`)},
		{200, []byte(`{"data":{"kubeconfig":"x"}}`)},
		{200, signed("zzzzzz")},
		{200, []byte(`not json`)},
		{200, signed("abcdef")},
	}
	var asked []string
	f := testFlow(t, clusterInfoAnswers(&asked, answers))
	f.Timing.APIPoll = time.Millisecond
	c := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleControlPlane, CACert: "unused",
		ControlPlanes: []string{"10.77.0.10"}, Token: "abcdef.0123456789abcdef"}}
	require.NoError(t, waitForAPI(context.Background(), f, c))
	require.Len(t, asked, 1+len(answers), "readyz once, then cluster-info until signed for abcdef: %v", asked)
	assert.True(t, strings.HasSuffix(asked[1], clusterInfoPath), asked[1])

	// Never signed: the wait ends with a reason that names the step.
	err := waitForClusterInfo(context.Background(), f, &machineconfig.Config{Cluster: &machineconfig.Cluster{
		CACert: "unused", ControlPlanes: []string{"10.77.0.10"}, Token: "qqqqqq.0123456789abcdef"}}, 5*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not signed for token qqqqqq")
	assert.Contains(t, err.Error(), stepBootstrapToken)
}
