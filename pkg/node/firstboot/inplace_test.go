package firstboot

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/inplace"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
)

// fakeInPlacer decides what it is told; its Switch puts the staged
// slot's bundle where a mount of it would be.
type fakeInPlacer struct {
	e        *env
	bundle   string // the staged slot's index.json
	decision inplace.Decision

	mu       sync.Mutex
	active   layout.Slot
	switches int
	served   []string
}

func (f *fakeInPlacer) Decide(context.Context, layout.Slot, release.Release, layout.Slot, upgrade.Manifest) (inplace.Decision, error) {
	return f.decision, nil
}

func (f *fakeInPlacer) Switch(_ context.Context, staged layout.Slot) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.switches++
	f.active = staged
	f.e.write(layout.InPlaceSlotDir+layout.BundleDir+"/index.json", f.bundle)
	return nil
}

func (f *fakeInPlacer) Served(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served = append(f.served, ref)
	return nil
}

func (f *fakeInPlacer) Active() layout.Slot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active
}

func (f *fakeInPlacer) Named() layout.Slot { return f.Active() }

func (f *fakeInPlacer) calls() (switches int, served []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.switches, append([]string(nil), f.served...)
}

// bundleOf is a bundle's index.json naming testBundle's images, the
// Kubernetes ones at kube.
func bundleOf(kube string) string {
	var manifests []string
	for _, ref := range testBundle {
		if strings.HasSuffix(ref, ":v1.36.3") {
			ref = strings.TrimSuffix(ref, "v1.36.3") + kube
		}
		manifests = append(manifests, `{"annotations":{"io.containerd.image.name":"`+ref+`"}}`)
	}
	return `{"manifests":[` + strings.Join(manifests, ",") + `]}`
}

// A Kubernetes patch runs in place on the worker's turn: staged before
// the turn and found to change nothing but Kubernetes, then at its turn
// armed, its Kubernetes run from the staged slot (`kubeadm upgrade node`,
// the kubelet restarted) and the node's health checked, with the node
// neither drained nor rebooted. The slot boots at the next reboot, on
// trial, which finds nothing left to do and keeps it.
func TestWorkerRunsAKubernetesPatchInPlace(t *testing.T) {
	c, cp, w, _ := rolloutCluster(t)
	ip := &fakeInPlacer{e: w.e, bundle: bundleOf("v1.36.4"),
		decision: inplace.Decision{InPlace: true, Reason: "only Kubernetes changes: kubelet, kubeadm, kubectl, the bundle's images"}}
	w.o.InPlace = ip

	stopWorker := w.runInBackground(t)
	require.Eventually(t, func() bool {
		return strings.Contains(w.e.console.String(), "this node runs its Kubernetes in place at its turn")
	}, 15*time.Second, time.Millisecond, w.e.console.String())
	assert.Contains(t, w.e.console.String(), "upgrade: 1.3.0 in slot b: only Kubernetes changes: kubelet, kubeadm, kubectl, the bundle's images; it can run in place, without a reboot")

	cp.e.media.remove(layout.LabelUpgradeFAT)
	cp.trialBoot("1.3.0", "33333333-3333-3333-3333-333333333333")
	cp.e.runWatching(t, cp.o, func() bool { return c.phaseOf(t, "cp-1") == rollout.NodeDone })

	require.Eventually(t, func() bool { return c.statusOf(t, "w-1").Phase == rollout.NodeDone }, 15*time.Second, time.Millisecond, w.e.console.String())
	stopWorker()
	s := c.statusOf(t, "w-1")
	assert.Equal(t, "runs 1.3.0's Kubernetes in place; slot b boots it at the next reboot", s.Detail)
	assert.Zero(t, w.e.rebootCount(), "not rebooted")
	c.mu.Lock()
	assert.NotContains(t, c.cordons, "w-1=true", "never cordoned")
	c.mu.Unlock()
	assert.Equal(t, []string{"stage 1.3.0, cordoned false", "arm 1.3.0, cordoned false"}, w.stagedAndArmed(), "armed without a drain")
	switches, served := ip.calls()
	assert.Equal(t, 1, switches)
	assert.Equal(t, []string{"registry.k8s.io/kube-apiserver:v1.36.4"}, served, "the new images served before kubeadm runs")
	j := w.e.journal()
	require.NotNil(t, j.Upgrade)
	assert.Equal(t, nodestate.UpgradeInstalled, j.Upgrade.State)
	assert.False(t, j.Upgrade.InPlaceAt.IsZero())
	assert.Equal(t, "v1.36.4", j.Kubernetes, "kubeadm moved the node to the slot's Kubernetes")
	con := w.e.console.String()
	assert.Contains(t, con, "this node runs it in place, without a drain or a reboot")
	assert.Contains(t, con, "upgrade: this node runs slot b's Kubernetes (v1.36.4) in place; the slot boots at its next reboot")
	assert.NotContains(t, con, "draining node w-1")

	// firstboot restarted in the same boot: the upgrade runs on, it is
	// no fallback from it.
	w.e.console.Reset()
	w.e.runWatching(t, w.o, func() bool {
		return strings.Contains(w.e.console.String(), "health: passed") || strings.Contains(w.e.console.String(), "healthy")
	})
	assert.Contains(t, w.e.console.String(), "upgrade from 1.2.3 to 1.3.0: this boot runs its Kubernetes in place; slot b boots at the next reboot")
	assert.Equal(t, nodestate.UpgradeInstalled, w.e.journal().Upgrade.State, "not rolled back")
	assert.Zero(t, w.e.rebootCount())

	// The next reboot boots slot b on trial: nothing left to move, kept.
	ip.mu.Lock()
	ip.active = "" // a new boot: /run is empty
	ip.mu.Unlock()
	w.e.write(layout.BundleDir+"/index.json", bundleOf("v1.36.4"))
	w.trialBoot("1.3.0", "44444444-4444-4444-4444-444444444444")
	w.e.runWatching(t, w.o, func() bool { return w.e.journal().Upgrade.State == nodestate.UpgradeCommitted })
	assert.Equal(t, "v1.36.4", w.e.journal().Kubernetes)
}

// A node that runs the other slot's Kubernetes in place writes no upgrade
// into that slot, whose programs it runs, before its next boot.
func TestNoUpgradeIntoTheSlotRunInPlace(t *testing.T) {
	e, o, inst, key := upgradeEnv(t)
	o.InPlace = &fakeInPlacer{e: e, active: layout.SlotB}
	e.upgradeStick(key, "/stick", "1.3.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	e.runWatching(t, o, stepsSay(e, "upgrade=refused"))
	assert.Empty(t, inst.calls(), "nothing written")
	assert.Zero(t, e.reboots)
	assert.Contains(t, e.console.String(), "this boot runs slot b's Kubernetes in place, and the next upgrade goes into that slot: reboot this node first (it then boots slot b), and bring the upgrade again")
}
