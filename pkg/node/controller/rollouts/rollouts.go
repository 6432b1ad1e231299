// Package rollouts is the controller that takes a cluster node's part in
// its cluster's upgrades (the record and its rules are package
// pkg/node/kube/rollout). At each look, paced by Options.Poll, it reads
// the cluster's record; a control plane tends it as the cluster's admin
// (the nodes' reports folded in, a stale turn broken, a node of an older
// release given the record's write for its turn); every node reports
// its own status and takes its turn: the upgrade fetched from a peer and
// written into the other slot, staged, by the node (Node.Stage) while it
// still serves, before its turn when it can; then drained, the slot
// armed, rebooted into on trial, and done once the trial is blessed.
//
// An upgrade a person brings to a control plane of a cluster is handed
// to the cluster (Controller.Publish) instead of installed there alone.
package rollouts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// API is what a cluster node asks of the API to take its part in a
// cluster-wide upgrade, with its kubelet's credentials
// (pkg/node/kube/kubeclient.Client): it reads the cluster's record and
// writes its own status object (the rights come from addons.Upgrades and
// addons.NodeUpgradeStatus), cordons itself and evicts its own pods.
type API interface {
	rollout.API
	rollout.DrainAPI
}

// AdminAPI is what a control plane asks of the API as the cluster's
// admin (kubeadm's admin.conf) for its cluster's upgrades: it lists the
// nodes, writes the record, and applies the record's and every node's
// status object and rights.
type AdminAPI interface {
	rollout.API
	Nodes(ctx context.Context) ([]kubeclient.Node, error)
	ApplyManifest(ctx context.Context, manifest []byte, fieldManager string) error
}

// Options wire a cluster node to its cluster's upgrades. With API nil a
// node takes no part: an upgrade put into it installs on it alone.
type Options struct {
	// API opens the API as this node.
	API func() (API, error)
	// Admin opens the API as the cluster's admin, on a control plane.
	Admin func() (AdminAPI, error)
	// Peers opens the other nodes' registries, where the node fetches
	// the upgrade its cluster rolls out.
	Peers func() (upgradeshare.Peers, error)
	// ShareDir is the node's upgrade share on the host
	// (layout.UpgradesDir), which its registry serves to its peers.
	ShareDir string
	// Poll is how often a running node reads the cluster's record.
	Poll time.Duration
	// Drain bounds and paces a node's drain.
	Drain rollout.DrainOptions
	// StaleTurn is how long the node whose turn it is may give no sign
	// (its status unchanged) before a control plane stops the rollout;
	// zero never stops one. It must outlast a trial boot's tries, during
	// which the node reports nothing.
	StaleTurn time.Duration
}

// File is a rollout's upgrade file as the node's upgrade share reads it
// (upgradeshare.File): for upgrade.Open.
type File interface {
	io.ReaderAt
	Size() int64
	// Name names it on the console and in errors.
	Name() string
}

// Node is what the controller asks of the node (firstboot): its upgrade
// path, its reboot, and its console and journal.
type Node interface {
	controller.Reporter
	// UpgradeKeys are the keys the node trusts for upgrades under cfg.
	UpgradeKeys(cfg *machineconfig.Config) []signature.PublicKey
	// Stage checks the upgrade file, which must be the upgrade digest,
	// and writes it into the other slot under policy,
	// staged: the running slot still boots next. With the outcome
	// nodestate.OutcomeStaged it returns arm, which makes the staged slot
	// the next boot and records the upgrade in the node's journal, record
	// naming where it came from (outcome nodestate.OutcomeInstalled).
	// Neither reboots. beforeTurn: the node's turn has not come, and the
	// API servers it would check its Kubernetes skew with may be
	// rebooting: arm checks that skew instead, and a refusal is only
	// said, not shown as the node's message.
	Stage(ctx context.Context, cfg *machineconfig.Config, file File, digest, record string, policy upgrade.Policy, beforeTurn bool) (arm func(context.Context) nodestate.UpgradeResult, _ nodestate.UpgradeResult)
	// InPlace says whether the upgrade Stage staged (staged, its result)
	// changes nothing but Kubernetes (package inplace), and why or why
	// not, in a clause for the console ("" when it was not looked at).
	InPlace(staged nodestate.UpgradeResult) (ok bool, why string)
	// ApplyInPlace runs the Kubernetes of the upgrade an arm recorded
	// from its slot, without a reboot: the slot's programs bound over the
	// running ones, its images served, `kubeadm upgrade`, the kubelet
	// restarted, then the node's health checked. It is idempotent (a
	// firstboot restarted in the middle takes it up again), and the slot
	// boots on trial at the node's next reboot.
	ApplyInPlace(ctx context.Context, cfg *machineconfig.Config) error
	// RunsInPlace names the slot whose Kubernetes this boot runs in
	// place, "" none: that slot boots at the next reboot, and no upgrade
	// is written into it before.
	RunsInPlace() string
	// Reboot reboots into the slot an upgrade was installed in.
	Reboot(ctx context.Context)
	// RebootAsked is when this boot last asked for that reboot (zero:
	// never).
	RebootAsked() time.Time
}

// Holder is the node's change lock (controller.ChangeLock): a turn holds
// it, so that no config change or other upgrade runs beside it.
type Holder interface {
	Hold(what string)
	Unlock()
}

// Controller takes the node's part in its cluster's upgrades. It is made
// once a boot: its Publish and ClusterBad serve the node's upgrade path
// beside its looks.
type Controller struct {
	Options Options
	Node    Node
	Host    *host.Host
	Log     *slog.Logger
	// Space tells TERRA-STATE's free space, of which the upgrade share
	// keeps the config's reserve.
	Space diskspace.FS
	// Journal is the node's persisted state (the last upgrade, the bad
	// marks).
	Journal *nodestate.Store
	Status  *status.Publisher
	Changes Holder
	// Config is the config the node runs now.
	Config func() *machineconfig.Config
	// Version is the release the node runs, Slot the slot it booted.
	Version string
	Slot    layout.Slot

	// next is when the controller reads the cluster's record again.
	next time.Time
	// s is what it keeps between its looks.
	s state
}

// state is what the controller keeps between its looks at the cluster's
// upgrades.
type state struct {
	// mu guards api, admin, nodes and applied, which an upgrade handed to
	// the cluster (Publish) uses beside the controller's looks; the rest
	// is the looks' alone.
	mu sync.Mutex
	// api and admin are the clients, opened once and kept (one TLS
	// connection for every look), dropped after an error.
	api   API
	admin AdminAPI
	// nodes are the cluster's nodes as last listed, applied the node
	// names whose objects were last applied.
	nodes   []string
	applied string
	// nextNodes is when the nodes are listed again.
	nextNodes time.Time
	// nextFold is when the nodes' reports are folded again while no
	// rollout rolls.
	nextFold time.Time
	// grant is the node last given the record's write for its turn (""
	// for no one), once grantSet; unwritten is the node whose turn it is
	// with its status object unwritten, since unwrittenSince (this
	// control plane's clock).
	grant          string
	grantSet       bool
	unwritten      string
	unwrittenSince time.Time
	// sign is the turn's last sign of life, and signSince when this
	// control plane first saw it (its own clock).
	sign      string
	signSince time.Time
	// prestageTried is the rollout, and the node whose turn it was,
	// for which this boot last tried to stage the upgrade before its own
	// turn; staged is what it staged (prestage.go).
	prestageTried string
	staged        *prestaged
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "rollout" }

// Reconcile takes the node's part, at most every Options.Poll.
func (c *Controller) Reconcile(ctx context.Context) error {
	c.follow(ctx, c.Config())
	return nil
}

// StepName is the journal's step of the node's part in a rollout.
const StepName = "rollout"

// rebootGrace is how long a node whose reboot was asked for may go on
// running (systemd stopping its services) before it asks again.
const rebootGrace = 5 * time.Minute

// ErrBadInCluster refuses an upgrade that rolled back on a node of the
// cluster.
var ErrBadInCluster = errors.New("this upgrade rolled back in this cluster and is not installed again on its own")

// ErrRolledBackBefore refuses an upgrade that rolled back on this node
// before.
var ErrRolledBackBefore = errors.New("this upgrade was rolled back on this node before and is not installed again on its own")

// errUnsignedForce: a rollout forced by its record's flag alone.
var errUnsignedForce = errors.New("the rollout says forced, but no force instruction signed by a key this node trusts for upgrades comes with it " +
	"(a record written by a node of an older release, or forged), so this node installs it only as it would unforced")

// InRollout reports whether upgrades of a node running cfg go through
// its cluster's rollout.
func (c *Controller) InRollout(cfg *machineconfig.Config) bool {
	return cfg != nil && cfg.Cluster != nil && c.Options.API != nil
}

// follow reads the cluster's record and takes this node's part: on a
// control plane, the admin's (tend); then, as this node, its own status
// (what it runs, the bad marks it has read, a rollback of its last
// upgrade) and its turn: to upgrade (fetch, stage, drain, arm, reboot
// into the trial; the fetch and stage before the turn when it can), its blessed trial (uncordon, done), a rollout whose
// instructions do not verify (refused, nothing done).
func (c *Controller) follow(ctx context.Context, cfg *machineconfig.Config) {
	if !c.InRollout(cfg) {
		return
	}
	now := c.Host.Now()
	if now.Before(c.next) {
		return
	}
	c.next = now.Add(c.Options.Poll)
	api, err := c.client()
	if err != nil {
		c.Log.Debug("rollout: no API yet", "err", err)
		return
	}
	rec, err := rollout.Load(ctx, api)
	if err != nil {
		c.s.dropAPI() // opened again at the next look (a renewed certificate)
		c.Log.Warn("rollout: read the cluster's record", "err", err)
		return
	}
	if cfg.Cluster.IsControlPlane() {
		rec = c.tend(ctx, cfg, rec)
	}
	if rec.Rollout != nil {
		if sum := rec.Summary(); sum != c.Status.Get().Upgrade {
			c.Status.Publish(func(s *status.Status) { s.Upgrade = sum })
		}
	}
	me := cfg.Hostname
	rolling := rec.Rollout != nil && rec.Rollout.Phase == rollout.Rolling
	var (
		v    rollout.Verified
		verr error
	)
	if rolling {
		v, verr = rec.Verify(c.Node.UpgradeKeys(cfg), now)
	}
	st, err := rollout.UpdateStatus(ctx, api, me, func(s *rollout.Status) (bool, error) {
		write := s.Version != c.Version
		s.Version = c.Version
		for _, b := range rec.Bad {
			write = s.Remember(b) || write
		}
		// A verified force of the rolling upgrade cleared its mark.
		if rolling && verr == nil && v.Force != nil && rec.BadUpgrade(rec.Rollout.Digest) == nil {
			write = s.Forget(rec.Rollout.Digest) || write
		}
		return write, nil
	})
	switch {
	case errors.Is(err, rollout.ErrNoStatusObject):
		// A node that cannot report takes no turn.
		c.Log.Debug("rollout: this node's status", "err", err)
		return
	case err != nil:
		c.Log.Warn("rollout: this node's status", "err", err)
		return
	}
	u := c.Journal.LastUpgrade()
	if u != nil && u.State == nodestate.UpgradeRolledBack && !u.Reported {
		if c.reportRollback(ctx, api, me, rec, u) {
			c.markReported(u.Digest)
		}
		return
	}
	if c.releaseStopped(ctx, api, me, rec, st, u) {
		return
	}
	turn, ok := rec.Turn()
	if !ok {
		return
	}
	ro := rec.Rollout
	if turn.Name != me {
		if verr == nil {
			c.prestage(ctx, cfg, api, ro, turn.Name, v, st)
		}
		return
	}
	if st.Rollout == ro.ID() && (st.Phase == rollout.NodeDone || st.Phase == rollout.NodeFailed || st.Phase == rollout.NodeRolledBack) {
		return // reported; a control plane folds it into the record
	}
	err = verr
	if err == nil {
		if oerr := ro.CheckOrder(me, cfg.Cluster.IsControlPlane()); oerr != nil {
			err = fmt.Errorf("%w: %w", rollout.ErrUnverified, oerr)
		}
	}
	if err == nil && v.Force == nil {
		err = c.markedBad(st, ro.Digest, v)
	}
	if err != nil {
		c.refuseTurn(ctx, api, me, ro, err)
		return
	}
	switch {
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeCommitted && c.Version == ro.Version:
		c.endTurn(ctx, api, me, ro, rollout.NodeDone, fmt.Sprintf("runs %s, blessed", ro.Version))
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled && !u.InPlaceAt.IsZero() &&
		string(c.Slot) == u.FromSlot && c.Node.RebootAsked().IsZero():
		// Armed to run in place in this boot, and on its way when
		// firstboot restarted: taken up again (nothing done twice).
		c.Changes.Hold("the rollout's turn")
		defer c.Changes.Unlock()
		c.applyInPlace(ctx, cfg, api, ro, u.ToSlot)
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled && string(c.Slot) == u.FromSlot:
		// Installed in this boot; the reboot into it is on its way, or
		// did not happen (a failed systemctl): asked again after a grace.
		c.rebootInto(ctx, "rollout: %s is installed in slot %s; rebooting into it", ro.Version, u.ToSlot)
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled:
		// The trial boot, under way.
	case c.Node.RunsInPlace() != "":
		// Another slot's Kubernetes runs here: whatever this boot's
		// release, the turn reboots into that slot first.
		if !c.holdFor(ctx, api, ro, "the rollout's turn") {
			return
		}
		defer c.Changes.Unlock()
		c.takeTurn(ctx, cfg, api, ro, v, st.Rollout == ro.ID() && st.Phase == rollout.NodeDraining)
	case c.Version == ro.Version:
		c.endTurn(ctx, api, me, ro, rollout.NodeDone, "runs "+ro.Version+" already")
	default:
		if !c.holdFor(ctx, api, ro, "the rollout's turn") {
			return
		}
		defer c.Changes.Unlock()
		// A turn that got to its drain before (a restart, a power cut)
		// may have left the node cordoned: a failure puts it back in
		// service.
		c.takeTurn(ctx, cfg, api, ro, v, st.Rollout == ro.ID() && st.Phase == rollout.NodeDraining)
	}
}

// releaseStopped puts this node back in service when a turn drained it
// and its rollout no longer rolls: the rollout stopped (a control plane
// broke the turn as stale, the node went away drained and came back
// later) while the node was drained, rebooting or on trial, so no step of
// that turn will uncordon it. A trial boot under way is left to end (its
// blessing, or its rollback, which reportRollback reports); an upgrade
// the turn armed is booted, drained as it is, since any reboot would
// boot it anyway. The node's status then says how the turn ended (done
// when it runs the upgrade, failed when not), so an operator's later
// cordon is left alone. It reports whether it acted.
func (c *Controller) releaseStopped(ctx context.Context, api API, me string, rec rollout.Record, st rollout.Status, u *nodestate.Upgrade) bool {
	if st.Rollout == "" || (st.Phase != rollout.NodeDraining && st.Phase != rollout.NodeTrial) {
		return false
	}
	if ro := rec.Rollout; ro != nil && ro.ID() == st.Rollout && ro.Phase == rollout.Rolling {
		return false // the turn goes on
	}
	if u != nil && u.State == nodestate.UpgradeInstalled {
		switch string(c.Slot) {
		case u.ToSlot:
			return false // on trial: its blessing or rollback ends the turn
		case u.FromSlot:
			if u.Digest == st.Digest {
				// Drained for it still: its trial ends the turn.
				c.rebootInto(ctx, "rollout: %s is armed in slot %s and this node is drained for it, though its rollout stopped: rebooting into it on trial", u.To, u.ToSlot)
				return true
			}
		}
	}
	if c.rebootOnItsWay() {
		return false // to the trial
	}
	phase, detail := rollout.NodeFailed, fmt.Sprintf("its rollout stopped while this node was drained; back in service on %s", c.Version)
	if c.Version == st.Upgrade {
		phase, detail = rollout.NodeDone, fmt.Sprintf("runs %s, blessed after its rollout stopped; back in service", st.Upgrade)
	}
	if err := rollout.Uncordon(ctx, api, me); err != nil {
		c.Log.Warn("rollout: put this node back in service", "err", err)
		return true // tried again at the next look
	}
	if _, err := rollout.UpdateStatus(ctx, api, me, func(s *rollout.Status) (bool, error) {
		if s.Rollout != st.Rollout || s.Phase != st.Phase {
			return false, nil // written meanwhile
		}
		s.Phase, s.Detail, s.At = phase, detail, c.Host.Now().UTC()
		return true, nil
	}); err != nil {
		c.Log.Warn("rollout: record this node's phase", "phase", phase, "err", err)
		return true
	}
	c.Node.Note(StepName, step.Result(phase), detail)
	c.Node.Say("rollout of %s: this node is %s (%s)", st.Upgrade, phase, detail)
	return true
}

// rebootInto reboots the node into the slot armed in this boot, saying
// so, under the change lock; a reboot asked for less than rebootGrace ago
// is on its way and not asked again.
func (c *Controller) rebootInto(ctx context.Context, format string, args ...any) {
	if c.rebootOnItsWay() {
		return
	}
	c.Changes.Hold("the rollout's reboot")
	defer c.Changes.Unlock()
	c.Node.Say(format, args...)
	c.Node.Reboot(ctx)
}

// rebootOnItsWay reports whether a reboot was asked for less than
// rebootGrace ago.
func (c *Controller) rebootOnItsWay() bool {
	last := c.Node.RebootAsked()
	return !last.IsZero() && c.Host.Now().Sub(last) <= rebootGrace
}

// cordonedAs is phase, or draining for a node an earlier try of its turn
// left cordoned (drained): its status says so, so that a stop of the
// rollout now leaves it to releaseStopped.
func cordonedAs(phase string, drained bool) string {
	if drained {
		return rollout.NodeDraining
	}
	return phase
}

// holdFor takes the node's change lock for what, and reports whether
// the cluster's record still rolls ro out once it holds it; it lets go
// again when not. What held the lock before may have changed the record:
// a Publish that started ro before its copy of the stick failed stopped
// it again.
func (c *Controller) holdFor(ctx context.Context, api API, ro *rollout.Rollout, what string) bool {
	c.Changes.Hold(what)
	rec, err := rollout.Load(ctx, api)
	if err == nil && rec.Rollout != nil && rec.Rollout.ID() == ro.ID() && rec.Rollout.Phase == rollout.Rolling {
		return true
	}
	c.Changes.Unlock()
	if err != nil {
		c.Log.Warn("rollout: read the cluster's record", "err", err)
	}
	return false
}

// markedBad refuses, before anything is done, an unforced rollout of an
// upgrade this node knows is bad: rolled back here (its journal), or
// marked in the cluster as this node read it (its own status, which a
// record that lost the mark does not change).
func (c *Controller) markedBad(st rollout.Status, digest string, v rollout.Verified) error {
	var err error
	c.Journal.Read(func(j *nodestate.Journal) {
		if b := j.Bad(digest); b != nil {
			err = fmt.Errorf("%w: %s rolled back at %s (%s)", ErrRolledBackBefore, b.Version, stamp(b.At), b.Reason)
		}
	})
	if b := st.BadUpgrade(digest); err == nil && b != nil {
		err = fmt.Errorf("%w: %s rolled back on %s at %s (%s)", ErrBadInCluster, b.Version, b.Node, stamp(b.At), b.Reason)
	}
	if err != nil && v.UnsignedForce {
		err = fmt.Errorf("%w; %w", err, errUnsignedForce)
	}
	return err
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// client is the API the controller reads the record with, opened once
// and kept (one TLS connection for every look), not at each poll.
func (c *Controller) client() (API, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.api == nil {
		api, err := c.Options.API()
		if err != nil {
			return nil, err
		}
		c.s.api = api
	}
	return c.s.api, nil
}

// dropAPI drops the node's client after an error.
func (s *state) dropAPI() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.api = nil
}

// markReported records that the cluster knows the node's last upgrade
// rolled back: reported once, also after a forced rollout of it cleared
// the cluster's mark.
func (c *Controller) markReported(digest string) {
	if err := c.Journal.Update(func(j *nodestate.Journal) {
		if j.Upgrade != nil && j.Upgrade.Digest == digest {
			j.Upgrade.Reported = true
		}
	}); err != nil {
		c.Node.Say("recording the reported rollback: %v", err)
	}
}

// setPhase records this node's phase in the rollout ro in its own status
// object.
func (c *Controller) setPhase(ctx context.Context, api API, me string, ro *rollout.Rollout, phase, detail string) error {
	_, err := rollout.UpdateStatus(ctx, api, me, func(s *rollout.Status) (bool, error) {
		s.Rollout, s.Digest, s.Upgrade = ro.ID(), ro.Digest, ro.Version
		s.Phase, s.Detail, s.At = phase, detail, c.Host.Now().UTC()
		return true, nil
	})
	if err != nil {
		c.Log.Warn("rollout: record this node's phase", "phase", phase, "err", err)
	}
	return err
}

// refuseTurn answers a turn this node will not take, with nothing done:
// its phase failed, saying why, which stops the rollout.
func (c *Controller) refuseTurn(ctx context.Context, api API, me string, ro *rollout.Rollout, why error) {
	detail := "refused: " + why.Error()
	if err := c.setPhase(ctx, api, me, ro, rollout.NodeFailed, detail); err != nil {
		return
	}
	c.Node.Note(StepName, step.Refused, why.Error())
	c.Node.Say("rollout of %s refused on this node, nothing was done: %v", ro.Version, why)
}

// endTurn ends this node's turn: schedulable again and its phase
// recorded.
func (c *Controller) endTurn(ctx context.Context, api API, me string, ro *rollout.Rollout, phase, detail string) bool {
	if err := rollout.Uncordon(ctx, api, me); err != nil {
		c.Log.Warn("rollout: end this node's turn", "phase", phase, "err", err)
		return false
	}
	if err := c.setPhase(ctx, api, me, ro, phase, detail); err != nil {
		return false
	}
	c.Node.Note(StepName, step.Result(phase), detail)
	c.Node.Say("rollout: this node is %s (%s)", phase, detail)
	// The next look comes at once, not a poll later: a control plane
	// then passes the turn on in the record without waiting.
	c.next = time.Time{}
	return true
}

// reportRollback reports that this node's last upgrade rolled back: back
// in service, its status rolled-back (the control planes mark the
// upgrade bad for the cluster and stop its rollout) and the mark
// remembered.
func (c *Controller) reportRollback(ctx context.Context, api API, me string, rec rollout.Record, u *nodestate.Upgrade) bool {
	if err := rollout.Uncordon(ctx, api, me); err != nil {
		c.Log.Warn("rollout: report the rollback", "err", err)
		return false
	}
	now := c.Host.Now().UTC()
	_, err := rollout.UpdateStatus(ctx, api, me, func(s *rollout.Status) (bool, error) {
		s.Rollout = ""
		if ro := rec.Rollout; ro != nil && ro.Digest == u.Digest {
			s.Rollout = ro.ID()
		}
		s.Digest, s.Upgrade, s.Phase, s.Detail, s.At = u.Digest, u.To, rollout.NodeRolledBack, u.Reason, now
		s.Remember(rollout.Bad{Digest: u.Digest, Version: u.To, Node: me, Reason: u.Reason, At: now})
		return true, nil
	})
	if err != nil {
		c.Log.Warn("rollout: report the rollback", "err", err)
		return false
	}
	c.Node.Note(StepName, step.Result(rollout.NodeRolledBack), u.Reason)
	c.Node.Say("rollout: this node is %s (%s)", rollout.NodeRolledBack, u.Reason)
	return true
}

// takeTurn upgrades this node in the cluster's rollout: the upgrade
// fetched from a peer into the node's own share (which then serves it in
// turn), checked and written into the other slot, staged (forced only by
// a verified force instruction), all while the node still serves; then
// the node drained, the slot armed, and the node rebooted into it on
// trial. As Flatcar's update engine and Talos do, the slow part (reading,
// hashing and writing some hundreds of MiB) is done before the drain, not
// while the node's workloads are away; a node whose turn was not first
// has usually done it before its turn (prestage). A fetch or write that fails stops
// the rollout with the node's scheduling untouched (unless drained says
// an earlier try of this turn drained it); a drain or arm that fails puts
// the node back in service and stops it. A node that cannot record its
// phase does nothing: it tries again at its next look.
func (c *Controller) takeTurn(ctx context.Context, cfg *machineconfig.Config, api API, ro *rollout.Rollout, v rollout.Verified, drained bool) {
	me := cfg.Hostname
	fail := func(what string, err error) { c.failTurn(ctx, api, me, ro, what, err, drained) }
	if slot := c.Node.RunsInPlace(); slot != "" {
		c.rebootFirst(ctx, api, me, ro, slot)
		return
	}
	var (
		arm func(context.Context) nodestate.UpgradeResult
		res nodestate.UpgradeResult
	)
	if p, ok := c.prestagedFor(ro); ok {
		arm, res = p.arm, p.res
		c.Node.Say("rollout: upgrading this node to %s, staged in slot %s before its turn", ro.Version, res.Slot)
	} else {
		// Whether the node then drains is known once the slot is
		// written (Node.InPlace compares it with the running one).
		c.Node.Say("rollout: upgrading this node to %s: writing it into the other slot while this node serves", ro.Version)
		if err := c.setPhase(ctx, api, me, ro, cordonedAs(rollout.NodeInstalling, drained), "fetching "+ro.Ref); err != nil {
			return
		}
		var err error
		if arm, res, err = c.fetchAndStage(ctx, cfg, ro, v, false); err != nil {
			if ctx.Err() == nil {
				fail("fetch", err)
			}
			return
		}
	}
	switch res.Outcome {
	case nodestate.OutcomeStaged:
	case nodestate.OutcomeAlreadyInstalled:
		// The other slot holds it, but this node runs another version:
		// not done, and nothing this turn can fix alone.
		fail("install", fmt.Errorf("the other slot holds %s already but this node runs %s: reboot into it, or install it again with firstboot upgrade --force", ro.Version, c.Version))
		return
	default:
		err := errors.New(res.Detail)
		if v.UnsignedForce {
			err = fmt.Errorf("%w; %w", err, errUnsignedForce)
		}
		fail("install", err)
		return
	}
	if ok, why := c.Node.InPlace(res); ok {
		c.takeTurnInPlace(ctx, cfg, api, ro, arm, res, why, drained)
		return
	} else if why != "" {
		c.Node.Say("rollout: %s takes a reboot: %s", ro.Version, why)
	}
	c.Node.Say("rollout: %s is written into slot %s; draining this node", ro.Version, res.Slot)
	if err := c.setPhase(ctx, api, me, ro, rollout.NodeDraining, res.Version+" staged in slot "+res.Slot); err != nil {
		return
	}
	c.Node.Note(StepName, step.Result(rollout.NodeDraining), ro.Version)
	drained = true // cordoned from here on, also when the drain fails
	if err := c.drain(ctx, api, me); err != nil {
		if ctx.Err() == nil {
			fail("drain", err)
		}
		return
	}
	res = arm(ctx)
	c.s.staged = nil // armed, or its arm failed: the next turn stages again
	if res.Outcome != nodestate.OutcomeInstalled {
		fail("arm", errors.New(res.Detail))
		return
	}
	// The trial boot goes on whether or not the record heard.
	_ = c.setPhase(ctx, api, me, ro, rollout.NodeTrial, "rebooting into slot "+res.Slot)
	c.Node.Reboot(ctx)
}

// takeTurnInPlace ends a turn whose staged upgrade changes nothing but
// Kubernetes: the slot armed (a power cut from here on boots it, on
// trial, and its boot finishes the upgrade), then its Kubernetes run in
// place. The node is neither drained nor rebooted: its pods keep running
// through the kubelet's restart, as through `talosctl upgrade-k8s`.
func (c *Controller) takeTurnInPlace(ctx context.Context, cfg *machineconfig.Config, api API, ro *rollout.Rollout, arm func(context.Context) nodestate.UpgradeResult, staged nodestate.UpgradeResult, why string, drained bool) {
	me := cfg.Hostname
	c.Node.Say("rollout: %s is written into slot %s; %s, so this node runs it in place, without a drain or a reboot", ro.Version, staged.Slot, why)
	if err := c.setPhase(ctx, api, me, ro, cordonedAs(rollout.NodeInPlace, drained), why); err != nil {
		return
	}
	c.Node.Note(StepName, step.Result(rollout.NodeInPlace), ro.Version+": "+why)
	res := arm(ctx)
	c.s.staged = nil // armed, or its arm failed: the next turn stages again
	if res.Outcome != nodestate.OutcomeInstalled {
		c.failTurn(ctx, api, me, ro, "arm", errors.New(res.Detail), drained) // drained by an earlier try of this turn
		return
	}
	c.applyInPlace(ctx, cfg, api, ro, res.Slot)
}

// rebootFirst starts the turn of a node that runs the other slot's
// Kubernetes in place: the upgrade goes into that slot, so the node boots
// it first (drained, as for any reboot). Its trial boot, once blessed,
// takes the turn again, drained already.
func (c *Controller) rebootFirst(ctx context.Context, api API, me string, ro *rollout.Rollout, slot string) {
	if c.rebootOnItsWay() {
		return
	}
	c.Node.Say("rollout: this node runs slot %s's Kubernetes in place, and %s goes into that slot: draining it and rebooting into slot %s first", slot, ro.Version, slot)
	if err := c.setPhase(ctx, api, me, ro, rollout.NodeDraining, "rebooting into slot "+slot+" before the upgrade"); err != nil {
		return
	}
	if err := c.drain(ctx, api, me); err != nil {
		if ctx.Err() == nil {
			c.failTurn(ctx, api, me, ro, "in place", fmt.Errorf("drain before the reboot into slot %s: %w", slot, err), true)
		}
		return
	}
	c.Node.Reboot(ctx)
}

// applyInPlace runs the armed upgrade's Kubernetes in place and ends the
// turn. When that fails, the node takes the upgrade's other way, the one
// every upgrade took before: drained, and rebooted into the armed slot on
// trial, whose boot runs the Kubernetes upgrade again and falls back to
// the running slot if it fails too.
func (c *Controller) applyInPlace(ctx context.Context, cfg *machineconfig.Config, api API, ro *rollout.Rollout, slot string) {
	me := cfg.Hostname
	err := c.Node.ApplyInPlace(ctx, cfg)
	if err == nil {
		c.endTurn(ctx, api, me, ro, rollout.NodeDone, fmt.Sprintf("runs %s's Kubernetes in place; slot %s boots it at the next reboot", ro.Version, slot))
		return
	}
	if ctx.Err() != nil {
		return
	}
	c.Node.Note(StepName, step.Failed, "in place: "+err.Error())
	c.Node.Say("rollout: running %s in place failed (%v); draining this node and rebooting into slot %s instead", ro.Version, err, slot)
	if err := c.setPhase(ctx, api, me, ro, rollout.NodeDraining, "in place failed; rebooting into slot "+slot); err != nil {
		return
	}
	if err := c.drain(ctx, api, me); err != nil {
		if ctx.Err() == nil {
			c.failTurn(ctx, api, me, ro, "in place", fmt.Errorf("drain: %w; slot %s is armed, and the node's next reboot boots it on trial", err, slot), true)
		}
		return
	}
	_ = c.setPhase(ctx, api, me, ro, rollout.NodeTrial, "rebooting into slot "+slot)
	c.Node.Reboot(ctx)
}

// failTurn records a turn that failed, its phase failed, which stops the
// rollout; a node drained (cordoned) in the turn is put back in service
// first.
func (c *Controller) failTurn(ctx context.Context, api API, me string, ro *rollout.Rollout, what string, err error, drained bool) {
	detail := what + ": " + err.Error()
	if drained {
		if uerr := rollout.Uncordon(ctx, api, me); uerr != nil {
			detail += " (and uncordoning failed: " + uerr.Error() + ")"
		}
	}
	c.Node.Note(StepName, step.Result(rollout.NodeFailed), detail)
	c.Node.Say("rollout of %s stopped on this node: %s", ro.Version, detail)
	_ = c.setPhase(ctx, api, me, ro, rollout.NodeFailed, detail)
}

// drain drains this node, saying how it goes.
func (c *Controller) drain(ctx context.Context, api API, me string) error {
	d := c.Options.Drain
	d.Report = func(line string) { c.Node.Say("rollout: %s", line) }
	return rollout.Drain(ctx, api, me, d)
}

// fetchAttempts bounds the tries to fetch a rollout's upgrade from the
// peers (a registry restarting, a peer rebooting) before the node gives
// up its turn. A try that gets no headers ends after 30 s, so twelve span
// six minutes or more; each fetches only the blobs the ones before did
// not keep.
const fetchAttempts = 12

// fetch makes sure the node's share holds the rollout's upgrade,
// fetching it from a peer when it does not, and returns the share and
// the upgrade in it.
func (c *Controller) fetch(ctx context.Context, cfg *machineconfig.Config, ro *rollout.Rollout) (*upgradeshare.Share, upgradeshare.Artifact, error) {
	manifest, err := refManifest(ro)
	if err != nil {
		return nil, upgradeshare.Artifact{}, err
	}
	share, err := c.openShare(cfg)
	if err != nil {
		return nil, upgradeshare.Artifact{}, err
	}
	if a, ok := share.Find(manifest); ok {
		return share, a, nil
	}
	peers, err := c.Options.Peers()
	if err != nil {
		return nil, upgradeshare.Artifact{}, err
	}
	c.Node.Say("rollout: fetching %s from the cluster's registries", ro.Version)
	var a upgradeshare.Artifact
	for attempt := 1; ; attempt++ {
		if a, err = share.Fetch(ctx, peers, manifest); err == nil {
			break
		}
		if attempt == fetchAttempts || ctx.Err() != nil {
			return nil, upgradeshare.Artifact{}, err
		}
		c.Node.Say("rollout: fetching %s (attempt %d of %d): %v", ro.Version, attempt, fetchAttempts, err)
		select {
		case <-ctx.Done():
			return nil, upgradeshare.Artifact{}, ctx.Err()
		case <-time.After(c.Options.Poll):
		}
	}
	if err := share.Prune(a.Manifest); err != nil {
		c.Log.Warn("prune the upgrade share", "err", err)
	}
	return share, a, nil
}

// refManifest is the digest of the manifest of the artifact the rollout
// ro names.
func refManifest(ro *rollout.Rollout) (v1.Hash, error) {
	_, ref, ok := strings.Cut(ro.Ref, "@")
	if !ok {
		return v1.Hash{}, fmt.Errorf("the rollout names %q, not an artifact by digest", ro.Ref)
	}
	manifest, err := v1.NewHash(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("the rollout names %q: %w", ro.Ref, err)
	}
	return manifest, nil
}

// openShare opens the node's upgrade share, which keeps the config's
// reserve free on TERRA-STATE when it writes an upgrade file.
func (c *Controller) openShare(cfg *machineconfig.Config) (*upgradeshare.Share, error) {
	return upgradeshare.Open(c.Host.Path(c.Options.ShareDir), upgradeshare.WithSpace(c.Space, cfg.StateReserveBytes()))
}
