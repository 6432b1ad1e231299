package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// RolloutAPI is what a cluster node asks of the API to take its part in a
// cluster-wide upgrade, with its kubelet's credentials
// (pkg/node/kube/kubeclient.Client): it reads the cluster's record and writes
// its own status object (the rights come from addons.Upgrades and
// addons.NodeUpgradeStatus), cordons itself and evicts its own pods.
type RolloutAPI interface {
	rollout.API
	rollout.DrainAPI
}

// RolloutAdminAPI is what a control plane asks of the API as the
// cluster's admin (kubeadm's admin.conf) for its cluster's upgrades: it
// lists the nodes, writes the record, and applies the record's and every
// node's status object and rights.
type RolloutAdminAPI interface {
	rollout.API
	Nodes(ctx context.Context) ([]kubeclient.Node, error)
	ApplyManifest(ctx context.Context, manifest []byte, fieldManager string) error
}

// Rollout wires a cluster node to its cluster's upgrades
// (pkg/node/kube/rollout). With API nil a node takes no part: an upgrade put
// into it installs on it alone.
type Rollout struct {
	// API opens the API as this node.
	API func() (RolloutAPI, error)
	// Admin opens the API as the cluster's admin, on a control plane.
	Admin func() (RolloutAdminAPI, error)
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

// rolloutState is what the rollout controller keeps between its looks at the
// cluster's upgrades.
type rolloutState struct {
	// mu guards api, admin, nodes and applied, which an upgrade handed to
	// the cluster (publishUpgrade) uses beside the rollout controller;
	// the rest is the rollout controller's alone.
	mu sync.Mutex
	// api and admin are the clients, opened once and kept (one TLS
	// connection for every look), dropped after an error.
	api   RolloutAPI
	admin RolloutAdminAPI
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
}

// nodesEvery is how often a control plane lists the cluster's nodes, to
// give a node that joined its status object and rights.
const nodesEvery = time.Minute

// inRollout reports whether upgrades of this node go through its
// cluster's rollout.
func (r *runner) inRollout(cfg *machineconfig.Config) bool {
	return cfg != nil && cfg.Cluster != nil && r.o.Rollout.API != nil
}

// errWorkerPublish: a worker's registry serves no peers.
var errWorkerPublish = errors.New("a worker cannot hand an upgrade to its cluster (its registry serves no other node): " +
	"insert the stick into a control plane, which rolls it out to every node, workers included")

// errNotServing: a control plane whose registry serves no peers.
var errNotServing = errors.New("this control plane's registry serves no other node (registry.serve is off), so no node could fetch the upgrade from it: " +
	"insert the stick into a control plane that serves")

// errClusterUnreachable wraps what kept a node from handing an upgrade to
// its cluster: the API out of reach.
var errClusterUnreachable = errors.New("this node is part of a cluster, whose upgrades roll out node by node, but its API is out of reach " +
	"(firstboot upgrade --force installs on this node alone)")

// errForceNeedsInstruction: a forced rollout asked for without a force
// instruction.
var errForceNeedsInstruction = errors.New("a forced upgrade of a cluster needs a force instruction signed by a key trusted for upgrades beside the upgrade file " +
	"(made where the key is kept: imagebuild upgrade force --key KEY FILE writes FILE.force); no node of the cluster forces an upgrade without one")

// errForceRefused: the force instruction beside an upgrade file does not
// hold.
var errForceRefused = errors.New("the force instruction beside the upgrade file is refused")

// errUnsignedForce: a rollout forced by its record's flag alone.
var errUnsignedForce = errors.New("the rollout says forced, but no force instruction signed by a key this node trusts for upgrades comes with it " +
	"(a record written by a node of an older release, or forged), so this node installs it only as it would unforced")

// forceBeside reads the force instruction beside the upgrade file at
// path (path+upgrade.InstructionSuffix), if there is one, and checks it:
// signed by a key this node trusts for upgrades, about this upgrade
// (digest, version), not expired on this node's clock. It returns the
// instruction's file, "" when there is none; one that does not hold
// refuses the upgrade (errForceRefused).
func (r *runner) forceBeside(cfg *machineconfig.Config, path, digest, version string) (string, error) {
	name := path + upgrade.InstructionSuffix
	b, err := readSmall(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w: %w", errForceRefused, err)
	}
	base := filepath.Base(name)
	in, key, err := upgrade.VerifyInstruction(b, r.upgradeKeys(cfg))
	if err == nil {
		err = in.Check(digest, version, r.o.Host.Now())
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", errForceRefused, base, err)
	}
	r.say("upgrade: %s forces it: %s, signed by key %s", base, in, key.ID())
	return string(b), nil
}

// publishUpgrade hands a verified upgrade file to the cluster instead of
// installing it here: the file goes into the node's upgrade share, which
// its registry serves to the peers, and the cluster's record starts its
// rollout, node by node, with signed, the upgrade's signed manifest and
// any verified force instruction, which every node checks before it
// acts. A rollout of another upgrade in progress, this upgrade marked bad
// in the cluster (unless forced by an instruction), or a force asked for
// without one, refuses it.
func (r *runner) publishUpgrade(ctx context.Context, cfg *machineconfig.Config, path string, m upgrade.Manifest, digest string, signed rollout.Instructions, policy upgrade.Policy) (string, error) {
	if !cfg.Cluster.IsControlPlane() {
		return "", errWorkerPublish
	}
	if cfg.Registry == nil || !cfg.Registry.Serve {
		return "", errNotServing
	}
	// A kubelet may read only its own Node and writes no record: the
	// control plane lists the nodes and writes the record as the
	// cluster's admin, after making sure the record and every node's
	// status object and rights exist (a cluster formed before this
	// version has none).
	admin, err := r.rolloutAdmin()
	if err != nil {
		return "", fmt.Errorf("%w: %w", errClusterUnreachable, err)
	}
	nodes, err := r.applyNodeObjects(ctx, admin, true)
	if err != nil {
		r.rollout.dropAdmin()
		return "", fmt.Errorf("%w: %w", errClusterUnreachable, err)
	}
	if policy == upgrade.Force && signed.Force == "" {
		return "", errForceNeedsInstruction
	}
	members := make([]rollout.Member, 0, len(nodes))
	for _, n := range nodes {
		members = append(members, rollout.Member{Name: n.Name, ControlPlane: n.ControlPlane})
	}
	// Refused before the file is copied when the record says no.
	rec, err := rollout.Load(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errClusterUnreachable, err)
	}
	u := rollout.Upgrade{Digest: digest, Version: m.Version, Kubernetes: m.KubernetesVersion, Instructions: signed}
	if err := rec.Start(u, members, cfg.Hostname, r.o.Host.Now()); err != nil {
		return "", err
	}
	share, err := r.openShare(cfg)
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	r.say("upgrade: copying %s into this node's upgrade share, from which every node of the cluster fetches it", m.Version)
	art, err := share.Add(ctx, f, fi.Size(), m.Version)
	if err != nil {
		return "", err
	}
	u.Ref = art.Ref()
	rec, err = rollout.Update(ctx, admin, func(rec *rollout.Record) error {
		return rec.Start(u, members, cfg.Hostname, r.o.Host.Now())
	})
	if err != nil {
		return "", err
	}
	// Only what a rollout may still need stays in the share.
	if err := share.Prune(art.Manifest); err != nil {
		r.o.Log.Warn("prune the upgrade share", "err", err)
	}
	r.set(func(s *status.Status) { s.Upgrade = rec.Summary() })
	forced := ""
	if signed.Force != "" {
		forced = ", forced by its signed instruction"
	}
	return fmt.Sprintf("%s is rolling out to the cluster's %d nodes, one at a time, control planes first%s (firstboot upgrade status)",
		m.Version, len(members), forced), nil
}

// rolloutAdmin is the API as the cluster's admin, opened once and kept.
func (r *runner) rolloutAdmin() (RolloutAdminAPI, error) {
	if r.o.Rollout.Admin == nil {
		return nil, errors.New("no admin credential to write the cluster's upgrade record with")
	}
	r.rollout.mu.Lock()
	defer r.rollout.mu.Unlock()
	if r.rollout.admin == nil {
		api, err := r.o.Rollout.Admin()
		if err != nil {
			return nil, err
		}
		r.rollout.admin = api
	}
	return r.rollout.admin, nil
}

// dropAdmin drops the admin client after an error: opened again at the
// next use (a renewed certificate, another API server).
func (s *rolloutState) dropAdmin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admin = nil
}

// dropAPI drops the node's client after an error.
func (s *rolloutState) dropAPI() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.api = nil
}

// knownNodes are the cluster's nodes as last listed.
func (s *rolloutState) knownNodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nodes...)
}

// applyNodeObjects lists the cluster's nodes and applies, as the
// cluster's admin, the record's rights (addons.Upgrades, which takes from
// every node the write of the record a release before this one gave, and
// again after a control plane of that release gave it back) and, when the
// nodes changed since the last apply (or always), each node's status
// object and rights (addons.NodeUpgradeStatus). It returns the nodes.
func (r *runner) applyNodeObjects(ctx context.Context, admin RolloutAdminAPI, always bool) ([]kubeclient.Node, error) {
	nodes, err := admin.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the cluster's nodes: %w", err)
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	key := strings.Join(names, ",")
	r.rollout.mu.Lock()
	r.rollout.nodes = names
	known := r.rollout.applied == key
	r.rollout.mu.Unlock()
	manifests := [][]byte{addons.Upgrades}
	if !known || always {
		statuses, err := addons.NodeUpgradeStatus(names)
		if err != nil {
			return nil, err
		}
		manifests = append(manifests, statuses)
	}
	for _, m := range manifests {
		if err := admin.ApplyManifest(ctx, m, kubeadmflow.AddonFieldManager); err != nil {
			return nil, fmt.Errorf("the upgrades' record and rights: %w", err)
		}
	}
	r.rollout.mu.Lock()
	r.rollout.applied = key
	r.rollout.mu.Unlock()
	return nodes, nil
}

// clusterBad is the cluster's bad mark on digest, nil when it has none or
// the node takes no part in rollouts or cannot read the record: the
// record's mark, or the mark this node remembers in its own status
// object (a record that lost it is no reason to forget it).
func (r *runner) clusterBad(ctx context.Context, cfg *machineconfig.Config, digest string) *rollout.Bad {
	if !r.inRollout(cfg) {
		return nil
	}
	api, err := r.o.Rollout.API()
	if err != nil {
		return nil
	}
	if rec, err := rollout.Load(ctx, api); err == nil {
		if b := rec.BadUpgrade(digest); b != nil {
			c := *b
			return &c
		}
	}
	if st, err := rollout.LoadStatus(ctx, api, cfg.Hostname); err == nil {
		if b := st.BadUpgrade(digest); b != nil {
			c := *b
			return &c
		}
	}
	return nil
}

// followRollout reads the cluster's record and takes this node's part:
// on a control plane, the admin's (tendRollout); then, as this node, its
// own status (what it runs, the bad marks it has read, a rollback of its
// last upgrade) and its turn: to upgrade (drain, fetch, install, reboot
// into the trial), its blessed trial (uncordon, done), a rollout whose
// instructions do not verify (refused, nothing done).
func (r *runner) followRollout(ctx context.Context, cfg *machineconfig.Config, next *time.Time) {
	if !r.inRollout(cfg) {
		return
	}
	now := r.o.Host.Now()
	if now.Before(*next) {
		return
	}
	*next = now.Add(r.o.Rollout.Poll)
	api, err := r.rolloutClient()
	if err != nil {
		r.o.Log.Debug("rollout: no API yet", "err", err)
		return
	}
	rec, err := rollout.Load(ctx, api)
	if err != nil {
		r.rollout.dropAPI() // opened again at the next look (a renewed certificate)
		r.o.Log.Warn("rollout: read the cluster's record", "err", err)
		return
	}
	if cfg.Cluster.IsControlPlane() {
		rec = r.tendRollout(ctx, cfg, rec)
	}
	if rec.Rollout != nil {
		if sum := rec.Summary(); sum != r.pub.Get().Upgrade {
			r.pub.Publish(func(s *status.Status) { s.Upgrade = sum })
		}
	}
	me := cfg.Hostname
	rolling := rec.Rollout != nil && rec.Rollout.Phase == rollout.Rolling
	var (
		v    rollout.Verified
		verr error
	)
	if rolling {
		v, verr = rec.Verify(r.upgradeKeys(cfg), now)
	}
	st, err := rollout.UpdateStatus(ctx, api, me, func(s *rollout.Status) (bool, error) {
		write := s.Version != r.rel.Version
		s.Version = r.rel.Version
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
		r.o.Log.Debug("rollout: this node's status", "err", err)
		return
	case err != nil:
		r.o.Log.Warn("rollout: this node's status", "err", err)
		return
	}
	u := r.lastUpgrade()
	if u != nil && u.State == nodestate.UpgradeRolledBack && !u.Reported {
		if r.reportRollback(ctx, api, me, rec, u) {
			r.markReported(u.Digest)
		}
		return
	}
	turn, ok := rec.Turn()
	if !ok || turn.Name != me {
		return
	}
	ro := rec.Rollout
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
		err = r.markedBad(st, ro.Digest, v)
	}
	if err != nil {
		r.refuseTurn(ctx, api, me, ro, err)
		return
	}
	switch {
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeCommitted && r.rel.Version == ro.Version:
		r.endTurn(ctx, api, me, ro, rollout.NodeDone, fmt.Sprintf("runs %s, blessed", ro.Version))
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled && string(r.slot) == u.FromSlot:
		// Installed in this boot; the reboot into it is on its way, or
		// did not happen (a failed systemctl): asked again after a grace.
		if last := r.reboot.last(); last.IsZero() || now.Sub(last) > rebootGrace {
			r.changing.Hold("the rollout's reboot")
			defer r.changing.Unlock()
			r.say("rollout: %s is installed in slot %s; rebooting into it", ro.Version, u.ToSlot)
			r.rebootIntoUpgrade(ctx)
		}
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled:
		// The trial boot, under way.
	case r.rel.Version == ro.Version:
		r.endTurn(ctx, api, me, ro, rollout.NodeDone, "runs "+ro.Version+" already")
	default:
		r.changing.Hold("the rollout's turn")
		defer r.changing.Unlock()
		r.takeTurn(ctx, cfg, api, ro, v)
	}
}

// markedBad refuses, before anything is done, an unforced rollout of an
// upgrade this node knows is bad: rolled back here (its journal), or
// marked in the cluster as this node read it (its own status, which a
// record that lost the mark does not change).
func (r *runner) markedBad(st rollout.Status, digest string, v rollout.Verified) error {
	var err error
	r.state.Read(func(j *nodestate.Journal) {
		if b := j.Bad(digest); b != nil {
			err = fmt.Errorf("%w: %s rolled back at %s (%s)", errRolledBackBefore, b.Version, stamp(b.At), b.Reason)
		}
	})
	if b := st.BadUpgrade(digest); err == nil && b != nil {
		err = fmt.Errorf("%w: %s rolled back on %s at %s (%s)", errBadInCluster, b.Version, b.Node, stamp(b.At), b.Reason)
	}
	if err != nil && v.UnsignedForce {
		err = fmt.Errorf("%w; %w", err, errUnsignedForce)
	}
	return err
}

// rolloutClient is the API the rollout reads the record with, opened
// once and kept (one TLS connection for every look), not at each poll.
func (r *runner) rolloutClient() (RolloutAPI, error) {
	r.rollout.mu.Lock()
	defer r.rollout.mu.Unlock()
	if r.rollout.api == nil {
		api, err := r.o.Rollout.API()
		if err != nil {
			return nil, err
		}
		r.rollout.api = api
	}
	return r.rollout.api, nil
}

// markReported records that the cluster knows the node's last upgrade
// rolled back: reported once, also after a forced rollout of it cleared
// the cluster's mark.
func (r *runner) markReported(digest string) {
	if err := r.state.Update(func(j *nodestate.Journal) {
		if j.Upgrade != nil && j.Upgrade.Digest == digest {
			j.Upgrade.Reported = true
		}
	}); err != nil {
		r.say("recording the reported rollback: %v", err)
	}
}

// setPhase records this node's phase in the rollout ro in its own status
// object.
func (r *runner) setPhase(ctx context.Context, api RolloutAPI, me string, ro *rollout.Rollout, phase, detail string) error {
	_, err := rollout.UpdateStatus(ctx, api, me, func(s *rollout.Status) (bool, error) {
		s.Rollout, s.Digest, s.Upgrade = ro.ID(), ro.Digest, ro.Version
		s.Phase, s.Detail, s.At = phase, detail, r.o.Host.Now().UTC()
		return true, nil
	})
	if err != nil {
		r.o.Log.Warn("rollout: record this node's phase", "phase", phase, "err", err)
	}
	return err
}

// refuseTurn answers a turn this node will not take, with nothing done:
// its phase failed, saying why, which stops the rollout.
func (r *runner) refuseTurn(ctx context.Context, api RolloutAPI, me string, ro *rollout.Rollout, why error) {
	detail := "refused: " + why.Error()
	if err := r.setPhase(ctx, api, me, ro, rollout.NodeFailed, detail); err != nil {
		return
	}
	r.note("rollout", step.Refused, why.Error())
	r.say("rollout of %s refused on this node, nothing was done: %v", ro.Version, why)
}

// endTurn ends this node's turn: schedulable again and its phase
// recorded.
func (r *runner) endTurn(ctx context.Context, api RolloutAPI, me string, ro *rollout.Rollout, phase, detail string) bool {
	if err := rollout.Uncordon(ctx, api, me); err != nil {
		r.o.Log.Warn("rollout: end this node's turn", "phase", phase, "err", err)
		return false
	}
	if err := r.setPhase(ctx, api, me, ro, phase, detail); err != nil {
		return false
	}
	r.note("rollout", step.Result(phase), detail)
	r.say("rollout: this node is %s (%s)", phase, detail)
	return true
}

// reportRollback reports that this node's last upgrade rolled back: back
// in service, its status rolled-back (the control planes mark the
// upgrade bad for the cluster and stop its rollout) and the mark
// remembered.
func (r *runner) reportRollback(ctx context.Context, api RolloutAPI, me string, rec rollout.Record, u *nodestate.Upgrade) bool {
	if err := rollout.Uncordon(ctx, api, me); err != nil {
		r.o.Log.Warn("rollout: report the rollback", "err", err)
		return false
	}
	now := r.o.Host.Now().UTC()
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
		r.o.Log.Warn("rollout: report the rollback", "err", err)
		return false
	}
	r.note("rollout", step.Result(rollout.NodeRolledBack), u.Reason)
	r.say("rollout: this node is %s (%s)", rollout.NodeRolledBack, u.Reason)
	return true
}

// takeTurn upgrades this node in the cluster's rollout: drained, the
// upgrade fetched from a peer into the node's own share (which then
// serves it in turn), checked and installed (forced only by a verified
// force instruction), and the node rebooted into it on trial. A drain,
// fetch or install that fails puts the node back in service and stops
// the rollout. A node that cannot record its phase does nothing: it
// tries again at its next look.
func (r *runner) takeTurn(ctx context.Context, cfg *machineconfig.Config, api RolloutAPI, ro *rollout.Rollout, v rollout.Verified) {
	me := cfg.Hostname
	fail := func(what string, err error) {
		detail := what + ": " + err.Error()
		if uerr := rollout.Uncordon(ctx, api, me); uerr != nil {
			detail += " (and uncordoning failed: " + uerr.Error() + ")"
		}
		r.note("rollout", step.Result(rollout.NodeFailed), detail)
		r.say("rollout of %s stopped on this node: %s", ro.Version, detail)
		_ = r.setPhase(ctx, api, me, ro, rollout.NodeFailed, detail)
	}
	r.say("rollout: upgrading this node to %s: draining it", ro.Version)
	if err := r.setPhase(ctx, api, me, ro, rollout.NodeDraining, ""); err != nil {
		return
	}
	r.note("rollout", step.Result(rollout.NodeDraining), ro.Version)
	d := r.o.Rollout.Drain
	d.Report = func(line string) { r.say("rollout: %s", line) }
	if err := rollout.Drain(ctx, api, me, d); err != nil {
		if ctx.Err() == nil {
			fail("drain", err)
		}
		return
	}
	if err := r.setPhase(ctx, api, me, ro, rollout.NodeInstalling, "fetching "+ro.Ref); err != nil {
		return
	}
	art, err := r.fetchRollout(ctx, cfg, ro)
	if err != nil {
		if ctx.Err() == nil {
			fail("fetch", err)
		}
		return
	}
	share, err := upgradeshare.Open(r.o.Host.Path(r.o.Rollout.ShareDir))
	if err != nil {
		fail("fetch", err)
		return
	}
	policy := upgrade.Refuse
	if v.Force != nil {
		policy = upgrade.Force
	}
	res := r.installUpgrade(ctx, cfg, upgradeSource{
		what: "the cluster's rollout", record: "rollout of " + ro.Version + " started by " + ro.StartedBy,
		open:    func(fn func(path string) error) error { return fn(share.FilePath(art)) },
		rollout: true, digest: ro.Digest,
	}, policy, true)
	switch res.Outcome {
	case nodestate.OutcomeInstalled:
		// The trial boot goes on whether or not the record heard.
		_ = r.setPhase(ctx, api, me, ro, rollout.NodeTrial, "rebooting into slot "+res.Slot)
		r.rebootIntoUpgrade(ctx)
	case nodestate.OutcomeAlreadyInstalled:
		// The other slot holds it, but this node runs another version:
		// not done, and nothing this turn can fix alone.
		fail("install", fmt.Errorf("the other slot holds %s already but this node runs %s: reboot into it, or install it again with firstboot upgrade --force", ro.Version, r.rel.Version))
	default:
		err := errors.New(res.Detail)
		if v.UnsignedForce {
			err = fmt.Errorf("%w; %w", err, errUnsignedForce)
		}
		fail("install", err)
	}
}

// fetchAttempts bounds the tries to fetch a rollout's upgrade from the
// peers (a registry restarting, a peer rebooting, a peer hashing the
// upgrade file before it first serves it: over a minute on a busy control
// plane under TCG, docs/operations/qemu-ci.md) before the node gives up its
// turn. A try that gets no headers ends after 30 s, so twelve span six
// minutes or more.
const fetchAttempts = 12

// fetchRollout makes sure the node's share holds the rollout's upgrade,
// fetching it from a peer when it does not.
func (r *runner) fetchRollout(ctx context.Context, cfg *machineconfig.Config, ro *rollout.Rollout) (upgradeshare.Artifact, error) {
	_, ref, ok := strings.Cut(ro.Ref, "@")
	if !ok {
		return upgradeshare.Artifact{}, fmt.Errorf("the rollout names %q, not an artifact by digest", ro.Ref)
	}
	manifest, err := v1.NewHash(ref)
	if err != nil {
		return upgradeshare.Artifact{}, fmt.Errorf("the rollout names %q: %w", ro.Ref, err)
	}
	share, err := r.openShare(cfg)
	if err != nil {
		return upgradeshare.Artifact{}, err
	}
	if a, ok := share.Find(manifest); ok {
		return a, nil
	}
	peers, err := r.o.Rollout.Peers()
	if err != nil {
		return upgradeshare.Artifact{}, err
	}
	r.say("rollout: fetching %s from the cluster's registries", ro.Version)
	var a upgradeshare.Artifact
	for attempt := 1; ; attempt++ {
		if a, err = share.Fetch(ctx, peers, manifest); err == nil {
			break
		}
		if attempt == fetchAttempts || ctx.Err() != nil {
			return upgradeshare.Artifact{}, err
		}
		r.say("rollout: fetching %s (attempt %d of %d): %v", ro.Version, attempt, fetchAttempts, err)
		select {
		case <-ctx.Done():
			return upgradeshare.Artifact{}, ctx.Err()
		case <-time.After(r.o.Rollout.Poll):
		}
	}
	if err := share.Prune(a.Manifest); err != nil {
		r.o.Log.Warn("prune the upgrade share", "err", err)
	}
	return a, nil
}

// openShare opens the node's upgrade share, which keeps the config's
// reserve free on TERRA-STATE when it writes an upgrade file.
func (r *runner) openShare(cfg *machineconfig.Config) (*upgradeshare.Share, error) {
	return upgradeshare.Open(r.o.Host.Path(r.o.Rollout.ShareDir), upgradeshare.WithSpace(r.o.Space, cfg.StateReserveBytes()))
}
