package rollouts

import (
	"context"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
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
// turn, once a boot for each node whose turn it is (turn): only for a
// rollout whose instructions verified (v) and whose order holds, on a
// node it lists and has not done, that runs another version, knows no
// rollback of it (unless forced) and has no installed upgrade waiting
// for its reboot or trial. A failure is said and left for the next turn
// or its own, which tries again. The Kubernetes skew against the API
// servers, some of which may be rebooting now, is checked at the arm.
func (c *Controller) prestage(ctx context.Context, cfg *machineconfig.Config, api API, ro *rollout.Rollout, turn string, v rollout.Verified, st rollout.Status) {
	me := cfg.Hostname
	try := ro.ID() + " during the turn of " + turn
	if c.s.prestageTried == try || c.Version == ro.Version {
		return
	}
	if _, ok := c.prestagedFor(ro); ok {
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
	if u := c.Journal.LastUpgrade(); u != nil && u.State == nodestate.UpgradeInstalled {
		return // an upgrade's reboot or trial is under way: its slot is not to be written
	}
	if !c.holdFor(ctx, api, ro, "staging the rollout's upgrade before this node's turn") {
		return // tried again at the next look, if it still rolls
	}
	defer c.Changes.Unlock()
	c.s.prestageTried = try
	c.Node.Say("rollout: writing %s into the other slot while the nodes before this one take their turns", ro.Version)
	arm, res, err := c.fetchAndStage(ctx, cfg, ro, v, true)
	if err != nil {
		if ctx.Err() == nil {
			c.Node.Say("rollout: %s not staged before this node's turn, which tries again: fetch: %v", ro.Version, err)
		}
		return
	}
	if res.Outcome != nodestate.OutcomeStaged {
		c.Node.Say("rollout: %s not staged before this node's turn, which tries again: %s", ro.Version, res.Detail)
		return
	}
	c.s.staged = &prestaged{rollout: ro.ID(), arm: arm, res: res}
	c.Node.Note(StepName, step.Staged, res.Detail+", before this node's turn")
	if ok, _ := c.Node.InPlace(res); ok {
		c.Node.Say("rollout: %s is written into slot %s; this node runs its Kubernetes in place at its turn", ro.Version, res.Slot)
		return
	}
	c.Node.Say("rollout: %s is written into slot %s; this node drains and reboots into it at its turn", ro.Version, res.Slot)
}

// prestagedFor returns what this boot staged for the rollout ro before
// the node's turn; the turn drops it once it armed it, or failed to.
func (c *Controller) prestagedFor(ro *rollout.Rollout) (*prestaged, bool) {
	p := c.s.staged
	if p == nil || p.rollout != ro.ID() {
		return nil, false
	}
	return p, true
}

// fetchAndStage fetches the rollout's upgrade into the node's share (err
// says why it could not) and stages it from there, forced only by a
// verified force instruction; beforeTurn as Node.Stage takes it.
func (c *Controller) fetchAndStage(ctx context.Context, cfg *machineconfig.Config, ro *rollout.Rollout, v rollout.Verified, beforeTurn bool) (arm func(context.Context) nodestate.UpgradeResult, _ nodestate.UpgradeResult, err error) {
	share, art, err := c.fetch(ctx, cfg, ro)
	if err != nil {
		return nil, nodestate.UpgradeResult{}, err
	}
	policy := upgrade.Refuse
	if v.Force != nil {
		policy = upgrade.Force
	}
	file, err := share.Open(art)
	if err != nil {
		// A copy that cannot be read whole would fail every later try
		// alike: the next one fetches it again. The control plane that
		// published it keeps the cluster's one copy.
		if ro.StartedBy != cfg.Hostname {
			c.dropCopy(share, ro.Version)
		}
		return nil, nodestate.UpgradeResult{}, err
	}
	arm, res := c.Node.Stage(ctx, cfg, file, ro.Digest, "rollout of "+ro.Version+" started by "+ro.StartedBy, policy, beforeTurn)
	if err := file.Close(); err != nil {
		c.Log.Warn("close the upgrade share's file", "err", err)
	}
	if res.Outcome == nodestate.OutcomeFailed {
		// The write found the copy's bytes other than its signed
		// manifest says (or the disk returned other bytes): a copy kept
		// would fail every later try alike, so the next one fetches it
		// again (on the control plane that published it, the stick
		// inserted again copies it again).
		c.dropCopy(share, ro.Version)
	}
	return arm, res, nil
}

// dropCopy empties the node's share of a copy of the rollout's upgrade
// that failed, so that the next try fetches it again.
func (c *Controller) dropCopy(share *upgradeshare.Share, version string) {
	if err := share.Prune(); err != nil {
		c.Log.Warn("drop the upgrade share's copy after a failed write", "err", err)
		return
	}
	c.Node.Say("rollout: dropped this node's copy of %s: the next try fetches it again", version)
}
