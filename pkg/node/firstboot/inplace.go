package firstboot

import (
	"context"
	"fmt"
	"sync"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/inplace"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// InPlacer runs a staged upgrade's Kubernetes without a reboot, when the
// upgrade changes nothing else (package inplace; inplace.Disk on a
// machine).
type InPlacer interface {
	// Decide compares the running slot with the upgrade staged in the
	// other slot.
	Decide(ctx context.Context, running layout.Slot, rel release.Release, staged layout.Slot, m upgrade.Manifest) (inplace.Decision, error)
	// Switch makes the node run the staged slot's Kubernetes programs and
	// has the registry serve its images, until the next boot.
	Switch(ctx context.Context, staged layout.Slot) error
	// Served waits until the node's registry serves ref, an image of
	// the slot Switch named to it.
	Served(ctx context.Context, ref string) error
	// Active names the slot whose Kubernetes this boot runs in place, its
	// switch done ("" none).
	Active() layout.Slot
	// Named names the slot whose Kubernetes this boot runs in place or
	// began to switch to ("" none): it boots at the next reboot, and no
	// upgrade is written into it before.
	Named() layout.Slot
}

// stagedInPlace is what the node decided of the upgrade its last stage
// wrote.
type stagedInPlace struct {
	mu       sync.Mutex
	slot     string
	version  string
	decision inplace.Decision
}

func (s *stagedInPlace) set(slot, version string, d inplace.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slot, s.version, s.decision = slot, version, d
}

func (s *stagedInPlace) get(slot, version string) (inplace.Decision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slot != slot || s.version != version {
		return inplace.Decision{}, false
	}
	return s.decision, true
}

// decideInPlace decides whether the upgrade just staged runs in place,
// says so, and keeps the decision for the rollout's turn and its arm.
// A node that cannot tell reboots, as every upgrade did before.
func (r *runner) decideInPlace(ctx context.Context, staged slotinstall.Result) inplace.Decision {
	if r.o.InPlace == nil || r.flow == nil {
		return inplace.Decision{}
	}
	d, err := r.o.InPlace.Decide(ctx, r.slot, *r.rel, staged.Slot, staged.Manifest)
	if err != nil {
		d = inplace.Decision{Reason: "what it changes could not be compared: " + err.Error()}
	}
	r.inPlace.set(string(staged.Slot), staged.Manifest.Version, d)
	if d.InPlace {
		r.say("upgrade: %s in slot %s: %s; it can run in place, without a reboot", staged.Manifest.Version, staged.Slot, d.Reason)
	} else {
		r.say("upgrade: %s in slot %s takes a reboot: %s", staged.Manifest.Version, staged.Slot, d.Reason)
	}
	return d
}

// InPlace implements rollouts.Node.
func (n rolloutSide) InPlace(staged nodestate.UpgradeResult) (bool, string) {
	d, ok := n.r.inPlace.get(staged.Slot, staged.Version)
	if !ok {
		return false, ""
	}
	return d.InPlace, d.Reason
}

// ApplyInPlace implements rollouts.Node: the Kubernetes of the upgrade
// the arm recorded to run in place, from its slot, then the node's
// health. The node's phases run as the slot's own boot would run them,
// each only where its check fails: the kubeadm configuration for the new
// version, `kubeadm upgrade` and the kubelet's restart, the add-ons; so a
// second call after a firstboot restart does only what is left.
func (n rolloutSide) ApplyInPlace(ctx context.Context, cfg *machineconfig.Config) error {
	r := n.r
	u := r.state.LastUpgrade()
	if r.o.InPlace == nil || u == nil || u.State != nodestate.UpgradeInstalled || u.InPlaceAt.IsZero() || u.FromSlot != string(r.slot) {
		return fmt.Errorf("no upgrade is armed to run in place on this boot of slot %s", r.slot)
	}
	if err := r.o.InPlace.Switch(ctx, layout.Slot(u.ToSlot)); err != nil {
		return fmt.Errorf("run slot %s's Kubernetes: %w", u.ToSlot, err)
	}
	r.flow.SetKubernetesRoot(layout.InPlaceSlotDir)
	want, err := r.flow.KubernetesVersion()
	if err != nil {
		return err
	}
	if err := r.o.InPlace.Served(ctx, kubeadmflow.APIServerImage+":"+want); err != nil {
		return err
	}
	r.say("upgrade: this node runs slot %s's Kubernetes (%s) in place; the slot boots at its next reboot", u.ToSlot, want)
	if cfg.Cluster != nil && cfg.Cluster.IsControlPlane() {
		// A patch: the API server, the controller manager and the
		// scheduler restart at once on the new release, as at a boot,
		// not one after the other, each waited for by kubeadm.
		did, err := kubeadmflow.PrestartControlPlane(ctx, r.o.Host, layout.InPlaceSlotDir)
		if err != nil {
			return fmt.Errorf("start the control plane on %s: %w", want, err)
		}
		if did != "" {
			r.say("upgrade: %s", did)
		}
	}
	if err := r.applyPhases(ctx, cfg, r.phases(cfg), "in place"); err != nil {
		return err
	}
	if err := r.checkHealth(ctx, cfg); err != nil {
		return err
	}
	if closed, err := unpackwindow.Close(r.o.Host); err != nil {
		r.note("images durable", step.Failed, err.Error())
		return err
	} else if closed {
		r.note("images durable", step.Synced, "")
	}
	r.note("upgrade", step.InPlace, fmt.Sprintf("%s's Kubernetes from slot %s", u.To, u.ToSlot))
	r.publish()
	return nil
}

// RunsInPlace implements rollouts.Node.
func (n rolloutSide) RunsInPlace() string {
	if n.r.o.InPlace == nil {
		return ""
	}
	return string(n.r.o.InPlace.Named())
}
