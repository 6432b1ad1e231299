package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/leaselock"
	"github.com/terrarium-os/terrarium/pkg/node/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/upgradeshare"
)

// RolloutAPI is what a cluster node asks of the API to take its part in a
// cluster-wide upgrade, with its kubelet's credentials
// (pkg/node/kubeclient.Client; the rights come from addons.Upgrades).
type RolloutAPI interface {
	rollout.API // the record, and the lock (leaselock.InConfigMap)
	rollout.DrainAPI
}

// Rollout wires a cluster node to its cluster's upgrades
// (pkg/node/rollout). With API nil a node takes no part: an upgrade put
// into it installs on it alone.
type Rollout struct {
	// API opens the API as this node.
	API func() (RolloutAPI, error)
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
	// Lease is how long the rollout's Lease may go unrenewed (a node
	// rebooting into its trial holds it) before another node may take it.
	Lease time.Duration
}

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

// publishUpgrade hands a verified upgrade file to the cluster instead of
// installing it here: the file goes into the node's upgrade share, which
// its registry serves to the peers, and the cluster's record starts its
// rollout, node by node. A rollout of another upgrade in progress, or
// this upgrade marked bad in the cluster (unless forced), refuses it.
func (r *runner) publishUpgrade(ctx context.Context, cfg *machineconfig.Config, path string, m upgrade.Manifest, digest string, policy upgrade.Policy) (string, error) {
	if !cfg.Cluster.IsControlPlane() {
		return "", errWorkerPublish
	}
	if cfg.Registry == nil || !cfg.Registry.Serve {
		return "", errNotServing
	}
	// A kubelet may read only its own Node: the control plane lists them
	// as the cluster's admin, and makes sure the record, the Lease and
	// the nodes' Role exist (a cluster formed before this version has
	// none).
	admin, err := r.o.Cluster.API(kubeadmflow.AdminKubeconfig)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errClusterUnreachable, err)
	}
	nodes, err := admin.Nodes(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: list the cluster's nodes: %w", errClusterUnreachable, err)
	}
	if _, err := r.o.Host.WriteIfChanged(kubeadmflow.UpgradesManifest, addons.Upgrades, 0o644); err != nil {
		return "", err
	}
	if err := admin.ApplyManifest(ctx, addons.Upgrades, kubeadmflow.AddonFieldManager); err != nil {
		return "", fmt.Errorf("%w: the rollout's record: %w", errClusterUnreachable, err)
	}
	api, err := r.o.Rollout.API()
	if err != nil {
		return "", fmt.Errorf("%w: %w", errClusterUnreachable, err)
	}
	members := make([]rollout.Member, 0, len(nodes))
	for _, n := range nodes {
		members = append(members, rollout.Member{Name: n.Name, ControlPlane: n.ControlPlane})
	}
	// Refused before the file is copied when the record says no.
	rec, err := rollout.Load(ctx, api)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errClusterUnreachable, err)
	}
	u := rollout.Upgrade{Digest: digest, Version: m.Version, Kubernetes: m.KubernetesVersion, Forced: policy == upgrade.Force}
	if err := rec.Start(u, members, cfg.Hostname, r.o.Host.Now(), policy == upgrade.Force); err != nil {
		return "", err
	}
	share, err := upgradeshare.Open(r.o.Host.Path(r.o.Rollout.ShareDir))
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r.say("upgrade: copying %s into this node's upgrade share, from which every node of the cluster fetches it", m.Version)
	art, err := share.Add(ctx, f, m.Version)
	if err != nil {
		return "", err
	}
	u.Ref = art.Ref()
	rec, err = rollout.Update(ctx, api, func(rec *rollout.Record) error {
		return rec.Start(u, members, cfg.Hostname, r.o.Host.Now(), policy == upgrade.Force)
	})
	if err != nil {
		return "", err
	}
	// Only what a rollout may still need stays in the share.
	if err := share.Prune(art.Manifest); err != nil {
		r.o.Log.Warn("prune the upgrade share", "err", err)
	}
	r.status.Upgrade = rec.Summary()
	return fmt.Sprintf("%s is rolling out to the cluster's %d nodes, one at a time, control planes first (firstboot upgrade status)",
		m.Version, len(members)), nil
}

// clusterBad is the cluster's bad mark on digest, nil when it has none or
// the node takes no part in rollouts or cannot read the record.
func (r *runner) clusterBad(ctx context.Context, cfg *machineconfig.Config, digest string) *rollout.Bad {
	if !r.inRollout(cfg) {
		return nil
	}
	api, err := r.o.Rollout.API()
	if err != nil {
		return nil
	}
	rec, err := rollout.Load(ctx, api)
	if err != nil {
		return nil
	}
	if b := rec.BadUpgrade(digest); b != nil {
		c := *b
		return &c
	}
	return nil
}

// errRebootingIntoTrial ends a node's turn with its Lease kept: it reboots
// into the upgrade on trial, and takes the Lease back when it reports.
var errRebootingIntoTrial = errors.New("rebooting into the upgrade on trial")

// followRollout reads the cluster's record and takes this node's part:
// its turn to upgrade (drain, fetch, install, reboot into the trial),
// its blessed trial (uncordon, done) or its rollback (uncordon, the
// upgrade marked bad for the cluster, the rollout stopped).
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
		r.rolloutAPI = nil // opened again at the next look (a renewed certificate)
		r.o.Log.Warn("rollout: read the cluster's record", "err", err)
		return
	}
	if rec.Rollout != nil {
		if s := rec.Summary(); s != r.status.Upgrade {
			r.status.Upgrade = s
			r.publish()
		}
	}
	me := cfg.Hostname
	u := r.lastUpgrade()
	if u != nil && u.State == nodestate.UpgradeRolledBack && !u.Reported {
		if r.endTurn(ctx, api, me, u.Digest, rollout.NodeRolledBack, u.Reason) {
			r.markReported(u.Digest)
		}
		return
	}
	turn, ok := rec.Turn()
	if !ok || turn.Name != me {
		return
	}
	ro := rec.Rollout
	switch {
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeCommitted && r.rel.Version == ro.Version:
		r.endTurn(ctx, api, me, ro.Digest, rollout.NodeDone, fmt.Sprintf("runs %s, blessed", ro.Version))
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled && string(r.slot) == u.FromSlot:
		// Installed in this boot; the reboot into it is on its way, or
		// did not happen (a failed systemctl): asked again after a grace.
		if r.rebootAsked.IsZero() || now.Sub(r.rebootAsked) > rebootGrace {
			r.say("rollout: %s is installed in slot %s; rebooting into it", ro.Version, u.ToSlot)
			r.rebootIntoUpgrade(ctx)
		}
	case u != nil && u.Digest == ro.Digest && u.State == nodestate.UpgradeInstalled:
		// The trial boot, under way.
	case r.rel.Version == ro.Version:
		r.endTurn(ctx, api, me, ro.Digest, rollout.NodeDone, "runs "+ro.Version+" already")
	default:
		r.takeTurn(ctx, cfg, api, ro)
	}
}

// rolloutClient is the API the watch loop reads the record with, opened
// once and kept (one TLS connection for every look), not at each poll.
func (r *runner) rolloutClient() (RolloutAPI, error) {
	if r.rolloutAPI == nil {
		api, err := r.o.Rollout.API()
		if err != nil {
			return nil, err
		}
		r.rolloutAPI = api
	}
	return r.rolloutAPI, nil
}

// markReported records that the cluster's record knows the node's last
// upgrade rolled back: reported once, also after a forced rollout of it
// cleared the cluster's mark.
func (r *runner) markReported(digest string) {
	if err := r.state.Update(func(j *nodestate.Journal) {
		if j.Upgrade != nil && j.Upgrade.Digest == digest {
			j.Upgrade.Reported = true
		}
	}); err != nil {
		r.say("recording the reported rollback: %v", err)
	}
}

// rolloutLock is the rollout's lock, taken as this node with its
// kubelet's credentials: kept in a ConfigMap, since the NodeRestriction
// admission plugin refuses a node any Lease but its own heartbeat.
func (r *runner) rolloutLock(api RolloutAPI, me string) (*leaselock.Lock, error) {
	return leaselock.New(leaselock.InConfigMap(api), rollout.Namespace, rollout.LockName, me,
		leaselock.WithDuration(r.o.Rollout.Lease), leaselock.WithPoll(r.o.Rollout.Poll),
		leaselock.WithClock(r.o.Host.Now), leaselock.KeepAfterFailure(),
		leaselock.WithReport(func(event, detail string) { r.o.Log.Info("rollout lock", "event", event, "detail", detail) }))
}

// setPhase records this node's phase in the rollout of digest.
func (r *runner) setPhase(ctx context.Context, api RolloutAPI, me, digest, phase, detail string) error {
	_, err := rollout.Update(ctx, api, func(rec *rollout.Record) error {
		return rec.Set(digest, me, phase, detail, r.o.Host.Now())
	})
	if err != nil {
		r.o.Log.Warn("rollout: record this node's phase", "phase", phase, "err", err)
	}
	return err
}

// endTurn ends this node's turn: schedulable again, its phase recorded,
// and the rollout's Lease released (this node held it across its reboot).
func (r *runner) endTurn(ctx context.Context, api RolloutAPI, me, digest, phase, detail string) bool {
	lock, err := r.rolloutLock(api, me)
	if err != nil {
		r.say("rollout: %v", err)
		return false
	}
	// The Lease is this node's or free; the bound keeps the watch loop
	// going should another node hold it.
	lctx, cancel := context.WithTimeout(ctx, 2*r.o.Rollout.Poll+time.Second)
	defer cancel()
	err = lock.Do(lctx, func(ctx context.Context) error {
		if err := rollout.Uncordon(ctx, api, me); err != nil {
			return err
		}
		return r.setPhase(ctx, api, me, digest, phase, detail)
	})
	if err != nil {
		r.o.Log.Warn("rollout: end this node's turn", "phase", phase, "err", err)
		return false
	}
	r.step("rollout", phase, detail)
	r.say("rollout: this node is %s (%s)", phase, detail)
	return true
}

// takeTurn upgrades this node in the cluster's rollout, holding its
// Lease: drained, the upgrade fetched from a peer into the node's own
// share (which then serves it in turn), checked and installed, and the
// node rebooted into it on trial. A drain, fetch or install that fails
// puts the node back in service and stops the rollout.
func (r *runner) takeTurn(ctx context.Context, cfg *machineconfig.Config, api RolloutAPI, ro *rollout.Rollout) {
	me := cfg.Hostname
	lock, err := r.rolloutLock(api, me)
	if err != nil {
		r.say("rollout: %v", err)
		return
	}
	fail := func(ctx context.Context, what string, err error) error {
		detail := what + ": " + err.Error()
		if uerr := rollout.Uncordon(ctx, api, me); uerr != nil {
			detail += " (and uncordoning failed: " + uerr.Error() + ")"
		}
		r.step("rollout", rollout.NodeFailed, detail)
		r.say("rollout of %s stopped on this node: %s", ro.Version, detail)
		return r.setPhase(ctx, api, me, ro.Digest, rollout.NodeFailed, detail)
	}
	err = lock.Do(ctx, func(ctx context.Context) error {
		// The record again, under the Lease: still this node's turn?
		rec, err := rollout.Load(ctx, api)
		if err != nil {
			return err
		}
		if turn, ok := rec.Turn(); !ok || turn.Name != me || rec.Rollout.Digest != ro.Digest {
			return nil
		}
		r.say("rollout: upgrading this node to %s: draining it", ro.Version)
		if err := r.setPhase(ctx, api, me, ro.Digest, rollout.NodeDraining, ""); err != nil {
			return err
		}
		r.step("rollout", rollout.NodeDraining, ro.Version)
		d := r.o.Rollout.Drain
		d.Report = func(line string) { r.say("rollout: %s", line) }
		if err := rollout.Drain(ctx, api, me, d); err != nil {
			return fail(ctx, "drain", err)
		}
		if err := r.setPhase(ctx, api, me, ro.Digest, rollout.NodeInstalling, "fetching "+ro.Ref); err != nil {
			return err
		}
		art, err := r.fetchRollout(ctx, ro)
		if err != nil {
			return fail(ctx, "fetch", err)
		}
		share, err := upgradeshare.Open(r.o.Host.Path(r.o.Rollout.ShareDir))
		if err != nil {
			return fail(ctx, "fetch", err)
		}
		policy := upgrade.Refuse
		if ro.Forced {
			policy = upgrade.Force
		}
		res := r.installUpgrade(ctx, cfg, upgradeSource{
			what: "the cluster's rollout", record: "rollout of " + ro.Version + " started by " + ro.StartedBy,
			open:    func(fn func(path string) error) error { return fn(share.FilePath(art)) },
			rollout: true, digest: ro.Digest,
		}, policy, true)
		switch res.Outcome {
		case outcomeInstalled:
			// The trial boot goes on whether or not the record heard.
			_ = r.setPhase(ctx, api, me, ro.Digest, rollout.NodeTrial, "rebooting into slot "+res.Slot)
			return errRebootingIntoTrial
		case outcomeAlreadyInstalled:
			// The other slot holds it, but this node runs another
			// version: not done, and nothing this turn can fix alone.
			return fail(ctx, "install", fmt.Errorf("the other slot holds %s already but this node runs %s: reboot into it, or install it again with firstboot upgrade --force", ro.Version, r.rel.Version))
		default:
			return fail(ctx, "install", errors.New(res.Detail))
		}
	})
	switch {
	case errors.Is(err, errRebootingIntoTrial):
		r.rebootIntoUpgrade(ctx)
	case err != nil && ctx.Err() == nil:
		r.o.Log.Warn("rollout: this node's turn", "err", err)
	}
}

// fetchAttempts bounds the tries to fetch a rollout's upgrade from the
// peers (a registry restarting, a peer rebooting, a peer hashing the
// upgrade file before it first serves it: about 100 s on a busy control
// plane under TCG in make e2e-upgrade run 5) before the node gives up its
// turn. A try that gets no headers ends after 30 s, so twelve span six
// minutes or more.
const fetchAttempts = 12

// fetchRollout makes sure the node's share holds the rollout's upgrade,
// fetching it from a peer when it does not.
func (r *runner) fetchRollout(ctx context.Context, ro *rollout.Rollout) (upgradeshare.Artifact, error) {
	_, ref, ok := strings.Cut(ro.Ref, "@")
	if !ok {
		return upgradeshare.Artifact{}, fmt.Errorf("the rollout names %q, not an artifact by digest", ro.Ref)
	}
	manifest, err := v1.NewHash(ref)
	if err != nil {
		return upgradeshare.Artifact{}, fmt.Errorf("the rollout names %q: %w", ro.Ref, err)
	}
	share, err := upgradeshare.Open(r.o.Host.Path(r.o.Rollout.ShareDir))
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
