package kubeadmflow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

func TestStepID(t *testing.T) {
	for name, want := range map[string]string{
		"init phase certs all":       "init-phase-certs-all",
		"pod network (flannel)":      "pod-network-flannel",
		"wait for the control plane": "wait-for-the-control-plane",
		"  Kubelet TLS bootstrap ":   "kubelet-tls-bootstrap",
	} {
		assert.Equal(t, want, StepID(name), name)
	}
}

// Every role's steps have IDs of their own: `--phase kubernetes/ID` names
// one step.
func TestStepIDsUnique(t *testing.T) {
	for _, role := range []string{machineconfig.RoleInit, machineconfig.RoleControlPlane, machineconfig.RoleWorker} {
		ids := StepIDs(&machineconfig.Config{Cluster: &machineconfig.Cluster{Role: role}})
		require.NotEmpty(t, ids, role)
		seen := map[string]bool{}
		for _, id := range ids {
			assert.False(t, seen[id], "%s: %s twice", role, id)
			assert.Regexp(t, `^[a-z0-9]+(-[a-z0-9]+)*$`, id)
			seen[id] = true
		}
	}
	assert.Nil(t, StepIDs(&machineconfig.Config{}), "no cluster, no steps")
}

// ranCommands is a host that records the programs run and lets each
// succeed.
type ranCommands struct {
	mu  sync.Mutex
	ran []string
}

func (r *ranCommands) exec(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, strings.Join(append([]string{name}, args...), " "))
	return nil, nil
}

func (r *ranCommands) kubeadm() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.ran {
		if strings.HasPrefix(c, "kubeadm ") {
			out = append(out, c)
		}
	}
	return out
}

// One kubeadm step runs alone on a formed node, as often as asked; the
// image unpack window, closed before, is closed after; a node still
// forming is refused, as is a name the role has not, and nothing runs.
func TestRunStepAlone(t *testing.T) {
	cmds := &ranCommands{}
	var reported []string
	f := testFlowOn(t, host.ExecFunc(cmds.exec), nil, host.ReporterFunc(func(name string, r step.Result, _ string) { reported = append(reported, name+"="+string(r)) }))
	h := f.Host
	cfg := &machineconfig.Config{Hostname: "cp-1", Cluster: &machineconfig.Cluster{Role: machineconfig.RoleInit, NodeIP: "10.77.0.10"}}
	ctx := context.Background()

	all := steps(cfg.Cluster)
	prog := loadProgress(f, NodeIdentity(cfg))
	for _, st := range all[:len(all)-1] {
		require.NoError(t, saveProgress(f, prog, st.name))
	}
	err := f.RunStep(ctx, cfg, "init-phase-certs-all")
	require.ErrorIs(t, err, ErrNotFormed)
	assert.Contains(t, err.Error(), fmt.Sprintf("%d of its %d kubeadm steps are done", len(all)-1, len(all)))
	assert.Empty(t, cmds.kubeadm(), "nothing run beside the service")

	require.NoError(t, saveProgress(f, prog, all[len(all)-1].name))
	require.NoError(t, f.RunStep(ctx, cfg, "init-phase-certs-all"))
	assert.Equal(t, []string{"kubeadm init phase certs all --config=" + KubeadmConfigFile}, cmds.kubeadm())
	assert.Equal(t, []string{"init phase certs all=started", "init phase certs all=done"}, reported)
	open, err := unpackwindow.IsOpen(h)
	require.NoError(t, err)
	assert.False(t, open, "the unpack window closed again")
	require.NoError(t, f.RunStep(ctx, cfg, "init-phase-certs-all"))
	assert.Len(t, cmds.kubeadm(), 2, "run again: done before is no reason not to")

	err = f.RunStep(ctx, cfg, "join-phase-etcd-join")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no kubeadm step "join-phase-etcd-join" on a node of role init; its steps, in order: container-runtime, `)
	assert.Len(t, cmds.kubeadm(), 2, "nothing run")

	require.ErrorIs(t, f.RunStep(ctx, &machineconfig.Config{}, "init-phase-certs-all"), ErrNoCluster)
}
