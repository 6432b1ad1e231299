package rollout

import (
	"fmt"
	"slices"
	"sort"
)

// Fold brings the nodes' own reports (each node's status, by node name)
// into the record, as a control plane does with the admin's credential,
// and reports whether the record changed:
//
//   - a node whose status names it is Reporting from then on;
//   - a status about the current rollout (its ID and digest) sets that
//     node's phase in it (Set: the last node done ends the rollout, a
//     failure or a rollback stops it);
//   - a rollback a node reports marks its upgrade bad for the cluster,
//     also outside a rollout (an upgrade it installed alone), except the
//     report of an earlier rollout of the upgrade that a force
//     instruction now rolls out again, which cleared that mark.
//
// A status that names another node, or a phase no node has, is no
// report.
func (r *Record) Fold(statuses map[string]Status) bool {
	names := make([]string, 0, len(statuses))
	for n := range statuses {
		names = append(names, n)
	}
	sort.Strings(names)
	changed := false
	for _, n := range names {
		s := statuses[n]
		if s.Node != n {
			continue
		}
		if !slices.Contains(r.Reporting, n) {
			r.Reporting = append(r.Reporting, n)
			sort.Strings(r.Reporting)
			changed = true
		}
		if s.Phase == "" || !isNodePhase(s.Phase) {
			continue
		}
		ro := r.Rollout
		current := ro != nil && s.Rollout == ro.ID() && s.Digest == ro.Digest
		if s.Phase == NodeRolledBack && s.Digest != "" && r.BadUpgrade(s.Digest) == nil && !current && !r.forcedAgain(s.Digest) {
			r.Bad = append(r.Bad, Bad{Digest: s.Digest, Version: s.Upgrade, Node: n, Reason: s.Detail, At: s.At.UTC()})
			changed = true
		}
		if !current {
			continue
		}
		if cur, ok := ro.Node(n); ok && (cur.Phase != s.Phase || cur.Detail != s.Detail || !cur.At.Equal(s.At)) {
			if err := r.Set(ro.Digest, n, s.Phase, s.Detail, s.At); err == nil {
				changed = true
			}
		}
	}
	return changed
}

// forcedAgain reports whether the current rollout is a forced one of
// digest: its start cleared the cluster's mark on it.
func (r *Record) forcedAgain(digest string) bool {
	ro := r.Rollout
	return ro != nil && ro.Digest == digest && ro.Forced && r.Instructions != nil && r.Instructions.Force != ""
}

// LegacyTurn is the node whose turn it is when it was never seen
// Reporting through its own status object: a node of a release before
// signed rollouts, which records its phases in the record itself and
// locks its turn in the lock's ConfigMap. For its turn alone it may
// write those two (addons.LegacyUpgradeGrant). "" when there is no such
// turn.
func (r *Record) LegacyTurn() string {
	n, ok := r.Turn()
	if !ok || slices.Contains(r.Reporting, n.Name) {
		return ""
	}
	return n.Name
}

// CheckOrder says what is wrong with the rollout's order for node me,
// whose role this node knows itself: each node listed once, control
// planes first, each group by name (as Start orders them), and me
// listed, in its own role. A node acts on no rollout that fails it.
func (ro *Rollout) CheckOrder(me string, controlPlane bool) error {
	seen := map[string]bool{}
	for i, n := range ro.Nodes {
		if seen[n.Name] {
			return fmt.Errorf("the rollout lists node %s twice", n.Name)
		}
		seen[n.Name] = true
		if i == 0 {
			continue
		}
		prev := ro.Nodes[i-1]
		if n.ControlPlane && !prev.ControlPlane {
			return fmt.Errorf("the rollout lists control plane %s after worker %s: control planes go first", n.Name, prev.Name)
		}
		if n.ControlPlane == prev.ControlPlane && n.Name < prev.Name {
			return fmt.Errorf("the rollout lists %s after %s: each group goes by name", n.Name, prev.Name)
		}
	}
	n, ok := ro.Node(me)
	switch {
	case !ok:
		return fmt.Errorf("the rollout does not list this node (%s)", me)
	case n.ControlPlane != controlPlane:
		role := "a worker"
		if n.ControlPlane {
			role = "a control plane"
		}
		return fmt.Errorf("the rollout lists this node (%s) as %s, which it is not", me, role)
	}
	return nil
}
