package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// readyAfter is a Node that turns Ready after notReady asks.
type readyAfter struct {
	oneNode
	notReady int
}

func (r *readyAfter) Node(_ context.Context, name string) (kubeclient.Node, error) {
	r.asked++
	return kubeclient.Node{Name: name, Ready: r.asked > r.notReady}, nil
}

// podNetworkRuntime answers Running with running for every container.
type podNetworkRuntime struct {
	noRuntime
	running bool
}

func (p podNetworkRuntime) Running(context.Context, string, string) (bool, error) {
	return p.running, nil
}

// systemd is a fake systemctl: the kubelet is active or not, and every
// command is recorded.
type systemd struct {
	mu     sync.Mutex
	active bool
	ran    []string
}

func (s *systemd) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := strings.Join(append([]string{name}, args...), " ")
	s.ran = append(s.ran, cmd)
	switch {
	case cmd == "systemctl is-active --quiet kubelet.service" && !s.active:
		return nil, errors.New("exit status 3")
	case cmd == "systemctl restart kubelet.service":
		s.active = true
	case name != "systemctl":
		return nil, errors.New(name + ": not in this test")
	}
	return nil, nil
}

func (s *systemd) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ran...)
}

// readyNode is a joined worker's flow: its kubelet kubeconfig is there,
// its API answers with node, its runtime runs the pod network's
// containers when podNetwork is set.
func readyNode(t *testing.T, sys *systemd, node *readyAfter, podNetwork bool) (*Flow, *machineconfig.Config) {
	t.Helper()
	f := testFlowOn(t, host.ExecFunc(sys.Run), nil, host.ReporterFunc(func(string, step.Result, string) {}))
	f.API = func(string) (APIClient, error) { return node, nil }
	f.Runtime = podNetworkRuntime{running: podNetwork}
	for _, p := range []string{KubeletKubeconfig, FlannelSubnetEnv} {
		require.NoError(t, os.MkdirAll(filepath.Dir(f.Path(p)), 0o755))
		require.NoError(t, os.WriteFile(f.Path(p), []byte("x"), 0o600))
	}
	return f, &machineconfig.Config{Hostname: "w-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker}}
}

// The kubernetes phase's Verify looks at files only: no API, no systemd.
func TestVerifyKubernetesOnlyLooks(t *testing.T) {
	sys := &systemd{}
	f, c := readyNode(t, sys, &readyAfter{notReady: 1000}, false)
	require.NoError(t, verifyKubernetes(context.Background(), f, c), "a joined worker whose node is not Ready is still joined")
	assert.Empty(t, sys.commands(), "Verify runs nothing")

	require.NoError(t, os.Remove(f.Path(KubeletKubeconfig)))
	assert.ErrorContains(t, verifyKubernetes(context.Background(), f, c), "has not joined")

	cp := &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleControlPlane}}
	require.NoError(t, os.WriteFile(f.Path(KubeletKubeconfig), []byte("x"), 0o600))
	assert.ErrorContains(t, verifyKubernetes(context.Background(), f, cp), "static pod etcd is missing")
	assert.Empty(t, sys.commands())
}

// kubernetes-ready's Verify asks once and acts on nothing; its Apply is
// where the kubelet is started and the node waited for.
func TestKubernetesReadyVerifyLooksOnce(t *testing.T) {
	tests := []struct {
		name       string
		active     bool
		notReady   int
		podNetwork bool
		wantErr    string
		wantAsked  int
	}{
		{"kubelet stopped", false, 0, true, "the kubelet is not running", 0},
		{"not Ready", true, 1000, true, "node w-1 is not Ready", 1},
		{"Ready, no pod network", true, 0, false, "node w-1 is Ready but its pod network is not: no running kube-flannel container", 1},
		{"Ready with its pod network", true, 0, true, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := &systemd{active: tt.active}
			node := &readyAfter{notReady: tt.notReady}
			f, c := readyNode(t, sys, node, tt.podNetwork)
			err := verifyKubernetesReady(context.Background(), f, c)
			if tt.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
			}
			assert.Equal(t, tt.wantAsked, node.asked, "the API is asked at most once")
			assert.Equal(t, []string{"systemctl is-active --quiet kubelet.service"}, sys.commands(), "Verify starts nothing")
		})
	}
}

func TestKubernetesReadyApplyStartsTheKubeletAndWaits(t *testing.T) {
	sys := &systemd{active: false}
	node := &readyAfter{notReady: 3}
	f, c := readyNode(t, sys, node, true)
	require.NoError(t, applyKubernetesReady(context.Background(), f, c))
	assert.Equal(t, []string{"systemctl is-active --quiet kubelet.service", "systemctl restart kubelet.service"}, sys.commands())
	assert.Equal(t, 4, node.asked, "asked until Ready")
	require.NoError(t, verifyKubernetesReady(context.Background(), f, c), "what Apply reached, Verify sees")

	// A running kubelet is left alone.
	sys = &systemd{active: true}
	f, c = readyNode(t, sys, &readyAfter{}, true)
	require.NoError(t, applyKubernetesReady(context.Background(), f, c))
	assert.NotContains(t, sys.commands(), "systemctl restart kubelet.service")
}

func TestKubernetesReadyIsAWaitingPhaseAfterKubernetes(t *testing.T) {
	f := testFlow(t, nil)
	ps := f.Phases()
	for i, p := range ps {
		if p.Name == PhaseKubernetesReady {
			require.Positive(t, i)
			assert.Equal(t, PhaseKubernetes, ps[i-1].Name)
			assert.True(t, p.Waits, "its Verify failing on a fresh boot is no drift")
			continue
		}
		assert.False(t, p.Waits, "%s writes what it checks", p.Name)
	}
	assert.Contains(t, phase.Names(ps), PhaseKubernetesReady)
}
