package rollouts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
	"github.com/terrarium-os/terrarium/pkg/node/kube/addons"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// errWorkerPublish: a worker's registry serves no peers.
var errWorkerPublish = errors.New("a worker cannot hand an upgrade to its cluster (its registry serves no other node): " +
	"insert the stick into a control plane, which rolls it out to every node, workers included")

// errNotServing: a control plane whose registry serves no peers.
var errNotServing = errors.New("this control plane's registry serves no other node (registry.serve is off), so no node could fetch the upgrade from it: " +
	"insert the stick into a control plane that serves")

// ErrClusterUnreachable wraps what kept a node from handing an upgrade
// to its cluster: the API out of reach.
var ErrClusterUnreachable = errors.New("this node is part of a cluster, whose upgrades roll out node by node, but its API is out of reach " +
	"(firstboot upgrade --force installs on this node alone)")

// errForceNeedsInstruction: a forced rollout asked for without a force
// instruction.
var errForceNeedsInstruction = errors.New("a forced upgrade of a cluster needs a force instruction signed by a key trusted for upgrades beside the upgrade file " +
	"(made where the key is kept: imagebuild upgrade force --key KEY FILE writes FILE.force); no node of the cluster forces an upgrade without one")

// Upgrade is a verified upgrade file a person brought, to hand to the
// cluster.
type Upgrade struct {
	// File is the upgrade file, its signature verified: Publish copies
	// its parts into the share, each checked against the signed
	// manifest on the way, and the share keeps them only if every part
	// matched. Manifest is its manifest and Digest the manifest's digest.
	File     *upgrade.Verified
	Manifest upgrade.Manifest
	Digest   string
	// Signed is the signed manifest and any verified force instruction,
	// which every node checks before it acts.
	Signed rollout.Instructions
	Policy upgrade.Policy
	// Slot, when set, begins writing the upgrade into this node's other
	// slot, staged, from the reads that copy its root filesystem into the
	// share, once every other part is checked (an error when this node
	// does not stage it so).
	Slot func(ctx context.Context) (SlotStream, error)
}

// SlotStream writes an upgrade's root filesystem into this node's other
// slot, staged, from the bytes the share copies from the stick: the stick
// is read and hashed once for both (slotinstall.Stream).
type SlotStream interface {
	// Write is handed the part's bytes as the share copies them, before
	// they are known to match the signed manifest.
	io.Writer
	// Finish, once the share kept the part (every byte matched), reads
	// the slot back beside twin, the share's copy read back from its
	// disk, and stages the slot.
	Finish(ctx context.Context, twin io.Reader) error
	// Close gives the slot up, staged or not.
	Close() error
}

// Publish hands a verified upgrade file to the cluster instead of
// installing it here: the file goes into the node's upgrade share, which
// its registry serves to the peers, and the cluster's record starts its
// rollout, node by node. A rollout of another upgrade in progress, this
// upgrade marked bad in the cluster (unless forced by an instruction), or
// a force asked for without one, refuses it. It returns what the console
// says.
func (c *Controller) Publish(ctx context.Context, cfg *machineconfig.Config, u Upgrade) (string, error) {
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
	admin, err := c.admin()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrClusterUnreachable, err)
	}
	nodes, err := c.applyNodeObjects(ctx, admin, true)
	if err != nil {
		c.s.dropAdmin()
		return "", fmt.Errorf("%w: %w", ErrClusterUnreachable, err)
	}
	if u.Policy == upgrade.Force && u.Signed.Force == "" {
		return "", errForceNeedsInstruction
	}
	members := make([]rollout.Member, 0, len(nodes))
	for _, n := range nodes {
		members = append(members, rollout.Member{Name: n.Name, ControlPlane: n.ControlPlane})
	}
	// Refused before the file is copied when the record says no.
	rec, err := rollout.Load(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrClusterUnreachable, err)
	}
	ru := rollout.Upgrade{Digest: u.Digest, Version: u.Manifest.Version, Kubernetes: u.Manifest.KubernetesVersion, Instructions: u.Signed}
	if err := rec.Start(ru, members, cfg.Hostname, c.Host.Now()); err != nil {
		return "", err
	}
	share, err := c.openShare(cfg)
	if err != nil {
		return "", err
	}
	var (
		art  upgradeshare.Artifact
		slot SlotStream
		// begun: the record names the rollout before the share held the
		// upgrade whole (AddServing); started is its ID when this
		// Publish started it.
		begun   bool
		started string
	)
	if older := c.olderMembers(ctx, admin, members, cfg.Hostname); len(older) > 0 {
		c.Node.Say("upgrade: %s run a release older than this node's %s, which reads an upgrade share of files whole: "+
			"checking every part of %s, then copying it whole into this node's upgrade share; every node of the cluster fetches it from there",
			strings.Join(older, ", "), c.Version, u.Manifest.Version)
		art, err = share.AddWhole(ctx, u.File)
	} else {
		c.Node.Say("upgrade: copying %s into this node's upgrade share, checking every part on the way; every node of the cluster fetches it from there, "+
			"the root filesystem as it is copied", u.Manifest.Version)
		art, err = share.AddServing(ctx, u.File, func(a upgradeshare.Artifact) error {
			// Every part but the root filesystem matched: the rollout
			// starts, and the peers fetch that one as it is copied.
			ru.Ref = a.Ref()
			r, id, uerr := c.start(ctx, admin, ru, members, cfg.Hostname)
			if uerr != nil {
				return uerr
			}
			rec, begun, started = r, true, id
			return nil
		}, c.slotTee(ctx, u, &slot)...)
	}
	if slot != nil {
		defer slot.Close()
	}
	if err != nil {
		if started != "" {
			c.stopStarted(ctx, admin, u, started, err)
		}
		return "", err
	}
	if !begun {
		ru.Ref = art.Ref()
		if rec, _, err = c.start(ctx, admin, ru, members, cfg.Hostname); err != nil {
			return "", err
		}
	} else if r, lerr := rollout.Load(ctx, admin); lerr == nil {
		rec = r // as it is now, the copy done
	}
	// Only what a rollout may still need stays in the share.
	if err := share.Prune(art.Manifest); err != nil {
		c.Log.Warn("prune the upgrade share", "err", err)
	}
	c.Status.Update(func(s *status.Status) { s.Upgrade = rec.Summary() })
	if slot != nil {
		c.finishSlot(ctx, share, art, u, slot)
	}
	forced := ""
	if u.Signed.Force != "" {
		forced = ", forced by its signed instruction"
	}
	return fmt.Sprintf("%s is rolling out to the cluster's %d nodes, one at a time, control planes first%s (firstboot upgrade status)",
		u.Manifest.Version, len(members), forced), nil
}

// start starts the rollout of ru, by me, in the cluster's record, and
// returns the record and, when this call started it, its ID. A rollout
// of the same upgrade that rolls already goes on: when this node started
// it (the stick copied again after its first copy was cut short), it
// names ru.Ref from now on, the artifact this node's share holds now.
func (c *Controller) start(ctx context.Context, admin rollout.API, ru rollout.Upgrade, members []rollout.Member, me string) (rollout.Record, string, error) {
	var created string
	rec, err := rollout.Update(ctx, admin, func(rec *rollout.Record) error {
		created = ""
		if cur := rec.Rollout; cur != nil && cur.Phase == rollout.Rolling && cur.Digest == ru.Digest {
			if cur.StartedBy != me || cur.Ref == ru.Ref {
				return rollout.ErrUnchanged
			}
			cur.Ref = ru.Ref
			return nil
		}
		if err := rec.Start(ru, members, me, c.Host.Now()); err != nil {
			return err
		}
		created = rec.Rollout.ID()
		return nil
	})
	return rec, created, err
}

// slotTee is the share's tee of u's root filesystem into this node's
// other slot (u.Slot), which sets *slot when it begins; none without
// u.Slot.
func (c *Controller) slotTee(ctx context.Context, u Upgrade, slot *SlotStream) []upgradeshare.Tee {
	rootfs, ok := u.Manifest.PartByRole(upgrade.RoleRootfs)
	if u.Slot == nil || !ok {
		return nil
	}
	return []upgradeshare.Tee{{Part: rootfs.Name, Open: func() io.Writer {
		s, err := u.Slot(ctx)
		switch {
		case errors.Is(err, upgrade.ErrAlreadyInstalled):
			c.Node.Say("upgrade: this node runs or holds %s already, and its other slot is not written along its copy (%v)", u.Manifest.Version, err)
			return nil
		case err != nil:
			c.Node.Say("upgrade: %s is not written into this node's other slot along its copy: %v", u.Manifest.Version, err)
			return nil
		}
		c.Node.Say("upgrade: writing %s into this node's other slot from the same reads", u.Manifest.Version)
		*slot = s
		return s
	}}}
}

// finishSlot checks the slot written along the share's copy against the
// share's copy and stages it. The rollout goes on whatever it finds:
// when the slot is not staged, this node's turn writes it from the
// share, checked against the signed manifest, as every other node's.
func (c *Controller) finishSlot(ctx context.Context, share *upgradeshare.Share, art upgradeshare.Artifact, u Upgrade, slot SlotStream) {
	rootfs, _ := u.Manifest.PartByRole(upgrade.RoleRootfs)
	twin, err := share.ReadBack(art, rootfs.Name)
	if err == nil {
		err = slot.Finish(ctx, twin)
		_ = twin.Close()
	}
	if err != nil {
		c.Node.Say("upgrade: %s was written into this node's other slot along its copy, but %v; the slot has no boot entry, and this node's turn writes it again from the share", u.Manifest.Version, err)
	}
}

// stopStarted stops this node's rollout of u, of ID id, that Publish
// started before the share's copy failed with why: no node installs what
// the share does not hold (a peer's fetch of it fails its digest, or
// finds it gone). It is stopped even when Publish's ctx ended (firstboot
// stopped): a record left rolling would answer the stick inserted again
// with "rolls out already".
func (c *Controller) stopStarted(ctx context.Context, admin rollout.API, u Upgrade, id string, why error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	_, err := rollout.Update(ctx, admin, func(rec *rollout.Record) error {
		if rec.Rollout == nil || rec.Rollout.ID() != id ||
			!rec.Stop(fmt.Sprintf("the copy of %s from the stick failed: %v (insert a good copy of it)", u.Manifest.Version, why)) {
			return rollout.ErrUnchanged
		}
		return nil
	})
	if err != nil {
		c.Node.Say("upgrade: the rollout of %s started, and the copy from the stick failed; stopping it failed too: %v (firstboot upgrade status)", u.Manifest.Version, err)
	}
}

// stopTimeout bounds stopStarted's write of the record.
const stopTimeout = time.Minute

// olderMembers names the members but me whose status object says they
// run a release older than this node's, or does not say (or cannot be
// read): such a node may read only an upgrade share of files whole
// (upgradeshare.AddWhole).
func (c *Controller) olderMembers(ctx context.Context, api rollout.API, members []rollout.Member, me string) []string {
	names := make([]string, 0, len(members))
	for _, m := range members {
		if m.Name != me {
			names = append(names, m.Name)
		}
	}
	statuses, missing, err := rollout.Statuses(ctx, api, names)
	if err != nil {
		c.Log.Warn("read the nodes' upgrade status objects", "err", err)
	}
	older := missing
	for _, n := range names {
		st, ok := statuses[n]
		if !ok {
			continue
		}
		if cmp, err := upgrade.CompareVersions(st.Version, c.Version); err != nil || cmp < 0 {
			older = append(older, n)
		}
	}
	sort.Strings(older)
	return older
}

// ClusterBad is the cluster's bad mark on digest, nil when it has none or
// the node takes no part in rollouts or cannot read the record: the
// record's mark, or the mark this node remembers in its own status
// object (a record that lost it is no reason to forget it).
func (c *Controller) ClusterBad(ctx context.Context, cfg *machineconfig.Config, digest string) *rollout.Bad {
	if !c.InRollout(cfg) {
		return nil
	}
	api, err := c.client()
	if err != nil {
		return nil
	}
	rec, recErr := rollout.Load(ctx, api)
	if recErr == nil {
		if b := rec.BadUpgrade(digest); b != nil {
			cp := *b
			return &cp
		}
	}
	st, stErr := rollout.LoadStatus(ctx, api, cfg.Hostname)
	if stErr == nil {
		if b := st.BadUpgrade(digest); b != nil {
			cp := *b
			return &cp
		}
	}
	if recErr != nil && stErr != nil {
		c.s.dropAPI() // opened again at the next use, as after a failed look
	}
	return nil
}

// RollingOut says whether the cluster's record rolls the upgrade of
// digest out now, and what the console says then: the stick of it
// inserted again, or left in through the control plane's trial boot,
// adds nothing, and is answered without reading the file whole (which
// would compete with the trial's control plane for the CPU for minutes).
// A rollout that stopped is not rolling: the same stick starts it again;
// nor is one this node started whose copy into its share was cut short
// (the stick copies it again, and the rollout goes on).
// It fails when the node takes part in rollouts but cannot read the
// record (the API out of reach, as early in a trial boot).
func (c *Controller) RollingOut(ctx context.Context, cfg *machineconfig.Config, digest string) (string, bool, error) {
	if !c.InRollout(cfg) {
		return "", false, nil
	}
	api, err := c.client()
	if err != nil {
		return "", false, err
	}
	rec, err := rollout.Load(ctx, api)
	if err != nil {
		c.s.dropAPI() // opened again at the next use, as after a failed look
		return "", false, err
	}
	ro := rec.Rollout
	if ro == nil || ro.Phase != rollout.Rolling || ro.Digest != digest {
		return "", false, nil
	}
	if ro.StartedBy == cfg.Hostname && !c.holds(cfg, ro) {
		// Started here, and its copy into the share cut short (a power
		// cut, firstboot stopped): the stick copies it again.
		return "", false, nil
	}
	return fmt.Sprintf("%s rolls out to the cluster already, started by %s at %s (firstboot upgrade status)",
		ro.Version, ro.StartedBy, ro.StartedAt.UTC().Format(time.RFC3339)), true, nil
}

// holds reports whether the node's share holds the artifact the rollout
// ro names whole.
func (c *Controller) holds(cfg *machineconfig.Config, ro *rollout.Rollout) bool {
	manifest, err := refManifest(ro)
	if err != nil {
		return false
	}
	share, err := c.openShare(cfg)
	if err != nil {
		return false
	}
	_, ok := share.Find(manifest)
	return ok
}

// nodesEvery is how often a control plane lists the cluster's nodes, to
// give a node that joined its status object and rights.
const nodesEvery = time.Minute

// admin is the API as the cluster's admin, opened once and kept.
func (c *Controller) admin() (AdminAPI, error) {
	if c.Options.Admin == nil {
		return nil, errors.New("no admin credential to write the cluster's upgrade record with")
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.admin == nil {
		api, err := c.Options.Admin()
		if err != nil {
			return nil, err
		}
		c.s.admin = api
	}
	return c.s.admin, nil
}

// dropAdmin drops the admin client after an error: opened again at the
// next use (a renewed certificate, another API server).
func (s *state) dropAdmin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admin = nil
}

// knownNodes are the cluster's nodes as last listed.
func (s *state) knownNodes() []string {
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
func (c *Controller) applyNodeObjects(ctx context.Context, admin AdminAPI, always bool) ([]kubeclient.Node, error) {
	nodes, err := admin.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the cluster's nodes: %w", err)
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	key := strings.Join(names, ",")
	c.s.mu.Lock()
	c.s.nodes = names
	known := c.s.applied == key
	c.s.mu.Unlock()
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
	c.s.mu.Lock()
	c.s.applied = key
	c.s.mu.Unlock()
	return nodes, nil
}
