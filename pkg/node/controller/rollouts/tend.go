package rollouts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/leaselock"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
)

// tend is a control plane's part in its cluster's upgrades as the
// cluster's admin, at each look: every node's status object and rights
// (when the nodes change), the nodes' reports folded into the record
// (the turn passes, the rollout ends or stops, rollbacks are marked bad),
// a stale turn broken, and the record's write for the turn of a node of
// an older release given and taken back. It returns the record as it left
// it; rec when it could not act (no admin credential, the API out of
// reach), which the next look tries again.
func (c *Controller) tend(ctx context.Context, cfg *machineconfig.Config, rec rollout.Record) rollout.Record {
	admin, err := c.admin()
	if err != nil {
		c.Log.Debug("rollout: no admin API yet", "err", err)
		return rec
	}
	now := c.Host.Now()
	if !now.Before(c.s.nextNodes) {
		if _, err := c.applyNodeObjects(ctx, admin, false); err != nil {
			c.s.dropAdmin()
			c.Log.Warn("rollout: the nodes' upgrade status objects", "err", err)
			return rec
		}
		c.s.nextNodes = now.Add(nodesEvery)
		if c.s.grantSet {
			c.breakLegacyLock(ctx, admin, c.s.grant)
		}
	}
	// Without a rollout rolling, only a rollback outside one is to fold:
	// looked for once a minute, not at every look.
	if rolling := rec.Rollout != nil && rec.Rollout.Phase == rollout.Rolling; !rolling && now.Before(c.s.nextFold) {
		c.grantLegacyTurn(ctx, admin, "")
		return rec
	}
	c.s.nextFold = now.Add(nodesEvery)
	var seen map[string]rollout.Status
	tended, err := rollout.Update(ctx, admin, func(rec *rollout.Record) error {
		known := c.s.knownNodes()
		names := known
		if ro := rec.Rollout; ro != nil && ro.Phase == rollout.Rolling {
			names = nil
			for _, n := range ro.Nodes {
				names = append(names, n.Name)
			}
			names = appendMissing(names, known)
		}
		statuses, missing, err := rollout.Statuses(ctx, admin, names)
		if err != nil {
			c.Log.Warn("rollout: read the nodes' upgrade status", "err", err)
		}
		seen = statuses
		if len(missing) > 0 && rec.Rollout != nil && rec.Rollout.Phase == rollout.Rolling {
			c.s.nextNodes = time.Time{} // give them their objects at the next look
		}
		changed := rec.Fold(statuses)
		if c.breakStaleTurn(rec, statuses, cfg.Hostname, now) {
			changed = true
		}
		if !changed {
			return rollout.ErrUnchanged
		}
		return nil
	})
	if err != nil {
		c.s.dropAdmin()
		c.Log.Warn("rollout: fold the nodes' reports into the record", "err", err)
		return rec
	}
	c.grantLegacyTurn(ctx, admin, c.legacyTurn(tended, seen, cfg.Hostname, now))
	return tended
}

// legacyGrace is how long the status object of the node whose turn it is
// must have stayed unwritten before a control plane takes it for a node
// of a release before signed rollouts: a node of this release writes it
// at its first look, seconds after it exists.
const legacyGrace = 2 * time.Minute

// legacyTurn is the node whose turn it is when it runs a release before
// signed rollouts (rollout.Record.LegacyTurn), judged by its status
// object: there, and still unwritten legacyGrace after this control
// plane first saw it so. Never this control plane, which knows its own
// release. "" for none.
func (c *Controller) legacyTurn(rec rollout.Record, statuses map[string]rollout.Status, me string, now time.Time) string {
	n := rec.LegacyTurn()
	s, ok := statuses[n]
	if n == "" || n == me || !ok || s.Node != "" {
		c.s.unwritten = ""
		return ""
	}
	if c.s.unwritten != n {
		c.s.unwritten, c.s.unwrittenSince = n, now
	}
	if now.Sub(c.s.unwrittenSince) < legacyGrace {
		return ""
	}
	return n
}

// appendMissing appends to names those of more it lacks.
func appendMissing(names, more []string) []string {
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	for _, n := range more {
		if !seen[n] {
			names = append(names, n)
		}
	}
	return names
}

// breakStaleTurn stops the rollout when the node whose turn it is gave no
// sign (its status, or for a node of an older release its entry in the
// record) for StaleTurn, judged on this control plane's own clock, and
// reports whether it did. No node holds the rollout by holding its turn:
// a node that died, or whose credential is used to sit on its turn, stops
// the rollout instead, which the same stick then starts again.
func (c *Controller) breakStaleTurn(rec *rollout.Record, statuses map[string]rollout.Status, me string, now time.Time) bool {
	turn, ok := rec.Turn()
	if !ok || c.Options.StaleTurn <= 0 {
		c.s.sign = ""
		return false
	}
	s := statuses[turn.Name]
	sign := fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s", rec.Rollout.ID(), turn.Name, turn.Phase, turn.At, s.Phase, s.Detail, s.At)
	if sign != c.s.sign {
		c.s.sign, c.s.signSince = sign, now
		return false
	}
	if now.Sub(c.s.signSince) < c.Options.StaleTurn {
		return false
	}
	reason := fmt.Sprintf("%s gave no sign in its turn for %s, and control plane %s stopped the rollout (the same stick starts it again)",
		turn.Name, c.Options.StaleTurn, me)
	if !rec.Stop(reason) {
		return false
	}
	c.s.sign = ""
	c.Node.Say("rollout: %s", reason)
	return true
}

// grantLegacyTurn gives the record's write, for its turn alone, to the
// node whose turn it is when it runs a release before signed rollouts
// (node; "" for none), and takes it back from the node that had it
// (addons.LegacyUpgradeGrant). It also clears the lock of that release
// when anyone but that node holds it: nodes of this release lock nothing,
// and a holder that upgraded, or is not on its turn, holds it stale.
func (c *Controller) grantLegacyTurn(ctx context.Context, admin AdminAPI, node string) {
	if c.s.grantSet && c.s.grant == node {
		return
	}
	if node == "" && !c.s.grantSet {
		// After this control plane's start: a grant from before it is
		// taken back only if there ever was one (its lock exists).
		if _, err := admin.ConfigMap(ctx, rollout.Namespace, rollout.LockName); errors.Is(err, kubeclient.ErrNotFound) {
			c.s.grant, c.s.grantSet = "", true
			return
		}
	}
	m, err := addons.LegacyUpgradeGrant(node)
	if err == nil {
		err = admin.ApplyManifest(ctx, m, kubeadmflow.AddonFieldManager)
	}
	if err != nil {
		c.Log.Warn("rollout: the record's write for a node of an older release", "node", node, "err", err)
		return
	}
	c.s.grant, c.s.grantSet = node, true
	if node != "" {
		c.Node.Say("rollout: %s runs a release before signed rollouts: for its turn alone, it may write the cluster's upgrade record and lock", node)
	}
	c.breakLegacyLock(ctx, admin, node)
}

// breakLegacyLock frees the lock of the release before signed rollouts
// when anyone but node (the node of that release whose turn it is) holds
// it.
func (c *Controller) breakLegacyLock(ctx context.Context, admin AdminAPI, node string) {
	store := leaselock.InConfigMap(admin)
	l, err := store.Lease(ctx, rollout.Namespace, rollout.LockName)
	if err != nil || l.Holder == "" || l.Holder == node {
		return
	}
	held := l.Holder
	l.Holder = ""
	if _, err := store.UpdateLease(ctx, l); err != nil {
		c.Log.Warn("rollout: free the older release's lock", "holder", held, "err", err)
		return
	}
	c.Log.Info("rollout: freed the older release's lock", "holder", held)
}
