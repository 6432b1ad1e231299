package kubeadmflow

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
)

// The two merged steps name, in --skip-phases, exactly the phases they do
// not run, at the control-plane phase's subphase granularity where only
// some of its subphases run.
func TestKubeadmInitSkipsEveryOtherPhase(t *testing.T) {
	for _, tc := range []struct {
		run  []string
		skip string
	}{
		{initJoinablePhases, "preflight,certs,kubeconfig,etcd,control-plane/apiserver,kubelet-start,wait-control-plane,upload-certs,kubelet-finalize,addon,show-join-command"},
		{initAddonPhases, "preflight,certs,kubeconfig,etcd,control-plane,kubelet-start,wait-control-plane,upload-config,upload-certs,mark-control-plane,bootstrap-token,show-join-command"},
		{[]string{"control-plane"}, "preflight,certs,kubeconfig,etcd,kubelet-start,wait-control-plane,upload-config,upload-certs,mark-control-plane,bootstrap-token,kubelet-finalize,addon,show-join-command"},
	} {
		st := kubeadmInit("step", tc.run)
		assert.Equal(t, []string{"init", "--skip-phases=" + tc.skip, "--config=" + KubeadmConfigFile}, st.args, "run %v", tc.run)
	}
}

// ranPhases is what one kubeadm step of the init node runs, as kubeadm
// init phase paths ("control-plane/scheduler", "addon").
func ranPhases(t *testing.T, st kubeadmStep) []string {
	t.Helper()
	switch {
	case len(st.args) == 0:
		return nil
	case st.args[0] == "init" && st.args[1] == "phase":
		// The control-plane phase's subphases are counted apart; another
		// phase's subphase ("etcd local") is its phase.
		p := st.args[2]
		if p == "control-plane" {
			require.Greater(t, len(st.args), 3, st.name)
			require.NotEqual(t, "all", st.args[3], "step %q runs every control-plane subphase at once", st.name)
			p += "/" + st.args[3]
		}
		return []string{p}
	case st.args[0] == "init" && strings.HasPrefix(st.args[1], "--skip-phases="):
		skipped := strings.Split(strings.TrimPrefix(st.args[1], "--skip-phases="), ",")
		var ran []string
		for _, p := range initPhases {
			if slices.Contains(skipped, p) {
				continue
			}
			if p != "control-plane" {
				ran = append(ran, p)
				continue
			}
			for _, sub := range controlPlaneSubphases {
				if !slices.Contains(skipped, p+"/"+sub) {
					ran = append(ran, p+"/"+sub)
				}
			}
		}
		return ran
	}
	t.Fatalf("step %q: kubeadm %v is not an init phase", st.name, st.args)
	return nil
}

// Across the init node's steps every phase of kubeadm init runs once, in
// kubeadm's own order, but those Terrarium does itself or does not need:
// preflight (step "node preflight"), wait-control-plane ("wait for the
// control plane"), upload-certs (no certificate key: control planes get
// the CAs from their config) and show-join-command.
func TestInitNodeRunsEveryInitPhaseOnce(t *testing.T) {
	var ran []string
	for _, st := range steps(&machineconfig.Cluster{Role: machineconfig.RoleInit}) {
		ran = append(ran, ranPhases(t, st)...)
	}
	assert.Equal(t, []string{"certs", "kubeconfig", "etcd", "control-plane/apiserver", "kubelet-start",
		"control-plane/controller-manager", "control-plane/scheduler", "upload-config", "mark-control-plane",
		"bootstrap-token", "kubelet-finalize", "addon"}, ran)
}

// After the API is ready, two kubeadm processes, and the cluster's own
// manifests between them: the pod network and CoreDNS's Corefile (which
// kubeadm's add-on phase keeps) after the uploaded configs and before
// the add-ons.
func TestInitNodeAfterTheAPI(t *testing.T) {
	var names []string
	kubeadmRuns := 0
	for _, st := range steps(&machineconfig.Cluster{Role: machineconfig.RoleInit}) {
		names = append(names, st.name)
		if st.args != nil && slices.Index(names, "wait for the control plane") >= 0 {
			kubeadmRuns++
		}
	}
	assert.Equal(t, 2, kubeadmRuns, "kubeadm processes after the API is ready: %v", names)
	i := func(name string) int {
		n := slices.Index(names, name)
		require.GreaterOrEqual(t, n, 0, "no step %q in %v", name, names)
		return n
	}
	assert.Less(t, i("wait for the control plane"), i(stepBootstrapToken))
	assert.Less(t, i(stepBootstrapToken), i("pod network (flannel)"))
	assert.Less(t, i("pod network (flannel)"), i(stepAddons))
	assert.Less(t, i("cluster DNS configuration"), i(stepAddons))
}

// The init node has used its token once it did the step that creates
// it: its expiry no longer matters.
func TestInitTokenUsed(t *testing.T) {
	f := testFlow(t, nil)
	assert.False(t, tokenUsed(f, machineconfig.RoleInit))
	require.NoError(t, saveProgress(f, &nodestate.KubeadmProgress{Node: "n"}, stepBootstrapToken))
	assert.True(t, tokenUsed(f, machineconfig.RoleInit))
}
