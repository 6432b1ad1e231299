// Package rollout is the cluster's record of an upgrade moving across its
// nodes, one node at a time: control planes first, then workers.
//
// Three kinds of object in kube-system hold it, each with one kind of
// writer:
//
//   - the record (ConfigMap terrarium-upgrades), written only by control
//     planes with the cluster's admin credential: the rollout in progress
//     (the upgrade's digest and version, where the nodes fetch it, the
//     nodes in the order they go and each one's phase), the upgrades the
//     cluster marked bad, and, under a key of their own, the rollout's
//     signed instructions (Instructions): the upgrade file's own manifest
//     and signature, and a force instruction when the rollout is forced;
//   - one status object per node (ConfigMap terrarium-upgrade-status-
//     <node>, Status), written only by that node with its kubelet's
//     credential: its phase in the rollout, and the upgrades it knows are
//     bad;
//   - the RBAC that says so (pkg/node/kube/addons).
//
// A node acts only on its own turn (the first node not done), and only
// on instructions it verified with the keys it trusts for upgrades
// (Record.Verify): a record whose manifest or force instruction does not
// verify, or names another upgrade than it signs, moves no node. The
// control planes fold the nodes' reports into the record (Record.Fold):
// the turn passes when the node whose turn it was reports done, and no
// node's credential moves it. The turn is the rollout's lock: no node
// holds anything another node's credential could take, and a control
// plane stops a rollout whose turn went stale.
package rollout

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Where the record lives.
const (
	Namespace = "kube-system"
	// ConfigMapName is the ConfigMap holding the record.
	ConfigMapName = "terrarium-upgrades"
	// LockName is the ConfigMap in which the nodes of a release before
	// signed rollouts lock their turn; it is kept, and writable, only for
	// such a node during its turn (addons.LegacyUpgradeGrant).
	LockName = "terrarium-upgrade-lock"
	// dataKey is the ConfigMap key of the JSON record.
	dataKey = "record.json"
	// instructionsKey is the ConfigMap key of the current rollout's
	// signed instructions: a key of its own, which a node of an older
	// release, rewriting record.json with the fields it knows, keeps.
	instructionsKey = "instructions.json"
)

// Phases of a rollout.
const (
	Rolling = "rolling"
	Done    = "done"
	Stopped = "stopped"
)

// Phases of one node in a rollout.
const (
	NodeWaiting    = "waiting"
	NodeDraining   = "draining"
	NodeInstalling = "installing"
	// NodeTrial: the node boots the upgrade on trial.
	NodeTrial = "trial"
	// NodeInPlace: the node runs the upgrade's Kubernetes from the
	// staged slot without a reboot or a drain, the upgrade changing
	// nothing else (package inplace); the slot boots at its next reboot.
	NodeInPlace = "in-place"
	NodeDone    = "done"
	// NodeFailed: the node could not drain or install; it still runs the
	// old version.
	NodeFailed = "failed"
	// NodeRolledBack: the node's trial boot failed and it fell back.
	NodeRolledBack = "rolled-back"
)

// Record is what the cluster knows of its upgrades.
type Record struct {
	Rollout *Rollout `json:"rollout,omitempty"`
	// Bad are the upgrades that rolled back somewhere in the cluster.
	Bad []Bad `json:"bad,omitempty"`
	// Reporting are the nodes seen reporting through their own status
	// object: they run a release of signed rollouts and never get the
	// record's write (LegacyTurn).
	Reporting []string `json:"reporting,omitempty"`
	// Instructions are the current rollout's signed instructions, nil
	// when it has none (started by a node of a release before signed
	// rollouts). They are kept under a ConfigMap key of their own.
	Instructions *Instructions `json:"-"`
}

// Instructions are what the nodes act on in a rollout, signed by keys
// they trust for upgrades: the upgrade file's own manifest and its
// signature, as the file holds them (so an unforced rollout needs no key
// but the build's), and, for a forced rollout, a force instruction
// (upgrade.Instruction) made on the build or operator host.
type Instructions struct {
	// Digest is the upgrade they are about (Rollout.Digest).
	Digest string `json:"digest"`
	// Manifest and ManifestSignature are manifest.json and
	// manifest.json.sig of the upgrade file, byte for byte.
	Manifest          string `json:"manifest"`
	ManifestSignature string `json:"manifestSignature"`
	// Force is a force instruction's file, when the rollout is forced.
	Force string `json:"force,omitempty"`
}

// Rollout is one upgrade moving across the cluster.
type Rollout struct {
	// Digest identifies the upgrade file (the sha256 of its signed
	// manifest); Version and Kubernetes are what it installs.
	Digest     string `json:"digest"`
	Version    string `json:"version"`
	Kubernetes string `json:"kubernetes,omitempty"`
	// Ref is the upgrade file in the cluster's registry, as an OCI
	// artifact every node can pull from its peers.
	Ref string `json:"ref"`
	// Forced: started with a force instruction, the nodes install it so
	// too (a downgrade, or an upgrade that rolled back before). What a
	// node honors is the signed instruction (Instructions.Force), never
	// this flag alone, which a node of an older release wrote unsigned.
	Forced    bool      `json:"forced,omitempty"`
	StartedBy string    `json:"startedBy"`
	StartedAt time.Time `json:"startedAt"`
	Phase     string    `json:"phase"`
	// Reason says why a stopped rollout stopped.
	Reason string `json:"reason,omitempty"`
	// Nodes in the order they upgrade.
	Nodes []Node `json:"nodes"`
}

// Node is one node's part in a rollout.
type Node struct {
	Name         string    `json:"name"`
	ControlPlane bool      `json:"controlPlane,omitempty"`
	Phase        string    `json:"phase"`
	Detail       string    `json:"detail,omitempty"`
	At           time.Time `json:"at,omitzero"`
}

// Bad is an upgrade the cluster will not install again on its own.
type Bad struct {
	Digest  string    `json:"digest"`
	Version string    `json:"version"`
	Node    string    `json:"node"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Member is a node of the cluster as the rollout orders it.
type Member struct {
	Name         string
	ControlPlane bool
}

// Upgrade is what a rollout installs.
type Upgrade struct {
	Digest, Version, Kubernetes, Ref string
	// Instructions are its signed instructions; a force instruction in
	// them forces the rollout (Rollout.Forced).
	Instructions Instructions
}

// Errors of Start.
var (
	// ErrBusy: another upgrade is rolling out.
	ErrBusy = errors.New("another upgrade is rolling out")
	// ErrBad: the upgrade rolled back in this cluster before.
	ErrBad = errors.New("this upgrade rolled back in this cluster before and is not rolled out again on its own")
)

// BadUpgrade is the cluster's mark on digest, nil when it has none.
func (r *Record) BadUpgrade(digest string) *Bad {
	for i := range r.Bad {
		if r.Bad[i].Digest == digest {
			return &r.Bad[i]
		}
	}
	return nil
}

// Start begins rolling u out to members, started by the node named by:
// control planes first, then workers, each by name. It refuses while
// another upgrade rolls out and, unless u carries a force instruction,
// an upgrade the cluster marked bad (forcing clears the mark; the caller
// verified the instruction, and every node verifies it again). Starting
// the upgrade that rolls out already changes nothing.
func (r *Record) Start(u Upgrade, members []Member, by string, at time.Time) error {
	force := u.Instructions.Force != ""
	if cur := r.Rollout; cur != nil && cur.Phase == Rolling {
		if cur.Digest == u.Digest {
			return nil
		}
		return fmt.Errorf("%w: %s, started by %s at %s (wait for it, or see firstboot upgrade status)",
			ErrBusy, cur.Version, cur.StartedBy, cur.StartedAt.UTC().Format(time.RFC3339))
	}
	if b := r.BadUpgrade(u.Digest); b != nil {
		if !force {
			return fmt.Errorf("%w: %s rolled back on %s at %s (%s)", ErrBad, b.Version, b.Node, b.At.UTC().Format(time.RFC3339), b.Reason)
		}
		r.clearBad(u.Digest)
	}
	if len(members) == 0 {
		return errors.New("start a rollout: the cluster lists no nodes")
	}
	ordered := append([]Member(nil), members...)
	sort.SliceStable(ordered, func(i, j int) bool {
		if ordered[i].ControlPlane != ordered[j].ControlPlane {
			return ordered[i].ControlPlane
		}
		return ordered[i].Name < ordered[j].Name
	})
	nodes := make([]Node, len(ordered))
	for i, m := range ordered {
		nodes[i] = Node{Name: m.Name, ControlPlane: m.ControlPlane, Phase: NodeWaiting}
	}
	r.Rollout = &Rollout{Digest: u.Digest, Version: u.Version, Kubernetes: u.Kubernetes, Ref: u.Ref, Forced: force,
		StartedBy: by, StartedAt: at.UTC(), Phase: Rolling, Nodes: nodes}
	r.Instructions = nil
	if in := u.Instructions; in.Manifest != "" || in.Force != "" {
		in.Digest = u.Digest
		r.Instructions = &in
	}
	return nil
}

// ID tells this rollout from another of the same upgrade: its digest and
// when it started. A node's status reports on the rollout of that ID.
func (ro *Rollout) ID() string {
	return ro.Digest + "@" + ro.StartedAt.UTC().Format(time.RFC3339Nano)
}

// Stop stops a rolling rollout, saying why, and reports whether it did.
func (r *Record) Stop(reason string) bool {
	if ro := r.Rollout; ro != nil && ro.Phase == Rolling {
		ro.Phase, ro.Reason = Stopped, reason
		return true
	}
	return false
}

func (r *Record) clearBad(digest string) {
	kept := r.Bad[:0]
	for _, b := range r.Bad {
		if b.Digest != digest {
			kept = append(kept, b)
		}
	}
	r.Bad = kept
}

// Turn is the node whose turn it is in a rolling upgrade: the first not
// done. ok is false when no rollout is rolling.
func (r *Record) Turn() (n Node, ok bool) {
	ro := r.Rollout
	if ro == nil || ro.Phase != Rolling {
		return Node{}, false
	}
	for _, n := range ro.Nodes {
		if n.Phase != NodeDone {
			return n, true
		}
	}
	return Node{}, false
}

// errNotInRollout: a node outside the rollout reported on it.
var errNotInRollout = errors.New("is not in the rollout")

// Set records a node's phase in the rollout of digest. The last node done
// ends the rollout; a node failed or rolled back stops it, and a rollback
// marks the upgrade bad for the whole cluster. A report on another
// rollout than the current one changes nothing but a rollback's mark.
func (r *Record) Set(digest, name, phase, detail string, at time.Time) error {
	at = at.UTC()
	ro := r.Rollout
	if phase == NodeRolledBack && r.BadUpgrade(digest) == nil {
		version := ""
		if ro != nil && ro.Digest == digest {
			version = ro.Version
		}
		r.Bad = append(r.Bad, Bad{Digest: digest, Version: version, Node: name, Reason: detail, At: at})
	}
	if ro == nil || ro.Digest != digest {
		return nil
	}
	i := ro.index(name)
	if i < 0 {
		return fmt.Errorf("node %s %w of %s", name, errNotInRollout, ro.Version)
	}
	ro.Nodes[i].Phase, ro.Nodes[i].Detail, ro.Nodes[i].At = phase, detail, at
	switch phase {
	case NodeFailed, NodeRolledBack:
		if ro.Phase == Rolling {
			ro.Phase, ro.Reason = Stopped, fmt.Sprintf("%s %s: %s", name, phase, detail)
		}
	case NodeDone:
		if _, more := r.Turn(); !more && ro.Phase == Rolling {
			ro.Phase = Done
		}
	}
	return nil
}

func (ro *Rollout) index(name string) int {
	for i, n := range ro.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// Node is the named node's part in the rollout, ok false when it has none.
func (ro *Rollout) Node(name string) (Node, bool) {
	if i := ro.index(name); i >= 0 {
		return ro.Nodes[i], true
	}
	return Node{}, false
}

// Summary is one line on the rollout: "0.2.0: rolling, 1 of 3 nodes done,
// cp-2 draining".
func (r *Record) Summary() string {
	ro := r.Rollout
	if ro == nil {
		return "no rollout"
	}
	done := 0
	for _, n := range ro.Nodes {
		if n.Phase == NodeDone {
			done++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s, %d of %d nodes done", ro.Version, ro.Phase, done, len(ro.Nodes))
	switch ro.Phase {
	case Rolling:
		if n, ok := r.Turn(); ok {
			fmt.Fprintf(&b, ", %s %s", n.Name, n.Phase)
		}
	case Stopped:
		fmt.Fprintf(&b, " (%s)", ro.Reason)
	}
	return b.String()
}
