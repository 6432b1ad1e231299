package rollouts

import (
	"context"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// A node whose turn has not come writes the rollout's upgrade into its
// other slot while the nodes before it take theirs: staged, it changes
// nothing the node boots or runs, and its turn is then the drain, the
// arm and the reboot alone. A rollout of n nodes so costs n drains and
// reboots plus one fetch and write, not n of each.

// prestaged is an upgrade this boot staged before the node's turn, for
// that turn.
type prestaged struct {
	// rollout is the rollout it was staged for (Rollout.ID).
	rollout string
	arm     func(context.Context) nodestate.UpgradeResult
	res     nodestate.UpgradeResult
}

// prestage stages the rolling rollout's upgrade on this node before its
// turn, once a boot and rollout: only for a rollout whose instructions
// verified (v) and whose order holds, on a node it lists and has not
// done, that runs another version and knows no rollback of it (unless
// forced). A failure is said and left for the turn, which tries again
// and reports it: a worker may not take a newer Kubernetes before its
// control planes run it, which the turn comes after.
func (c *Controller) prestage(ctx context.Context, cfg *machineconfig.Config, ro *rollout.Rollout, v rollout.Verified, st rollout.Status) {
	me := cfg.Hostname
	if c.s.prestageTried == ro.ID() || c.Version == ro.Version {
		return
	}
	if n, ok := ro.Node(me); !ok || n.Phase == rollout.NodeDone {
		return
	}
	if ro.CheckOrder(me, cfg.Cluster.IsControlPlane()) != nil {
		return
	}
	if v.Force == nil && c.markedBad(st, ro.Digest, v) != nil {
		return
	}
	if u := c.Journal.LastUpgrade(); u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled {
		return // installed already: its reboot or trial is under way
	}
	c.s.prestageTried = ro.ID()
	c.Changes.Hold("staging the rollout's upgrade before this node's turn")
	defer c.Changes.Unlock()
	c.Node.Say("rollout: writing %s into the other slot while the nodes before this one take their turns", ro.Version)
	share, art, err := c.fetch(ctx, cfg, ro)
	if err != nil {
		if ctx.Err() == nil {
			c.Node.Say("rollout: %s not staged before this node's turn, which tries again: fetch: %v", ro.Version, err)
		}
		return
	}
	policy := upgrade.Refuse
	if v.Force != nil {
		policy = upgrade.Force
	}
	arm, res := c.Node.Stage(ctx, cfg, share.FilePath(art), ro.Digest, "rollout of "+ro.Version+" started by "+ro.StartedBy, policy)
	if res.Outcome != nodestate.OutcomeStaged {
		c.Node.Say("rollout: %s not staged before this node's turn, which tries again: %s", ro.Version, res.Detail)
		return
	}
	c.s.staged = &prestaged{rollout: ro.ID(), arm: arm, res: res}
	c.Node.Note(StepName, step.Staged, res.Detail+", before this node's turn")
	c.Node.Say("rollout: %s is written into slot %s; this node drains and reboots into it at its turn", ro.Version, res.Slot)
}

// takePrestaged returns, once, what this boot staged for the rollout ro
// before the node's turn.
func (c *Controller) takePrestaged(ro *rollout.Rollout) (*prestaged, bool) {
	p := c.s.staged
	c.s.staged = nil
	if p == nil || p.rollout != ro.ID() {
		return nil, false
	}
	return p, true
}
