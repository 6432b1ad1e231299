package nodestate

import (
	"fmt"
	"slices"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Journal is the node's record of what it did, on TERRA-STATE. It
// survives reboots and power cuts (written to a temporary file, synced and
// renamed), so a later boot knows the node is provisioned.
type Journal struct {
	// Schema is the journal's format: Schema once read by this build, or
	// a newer one that ReadJournal read from a newer build's journal.
	Schema int `json:"schema"`
	// Enrollment is the node's desired state, set when it enrolls.
	Enrollment *Enrollment `json:"enrollment,omitempty"`
	// Provisioned is set once a config was fully applied.
	Provisioned *Provisioned `json:"provisioned,omitempty"`
	// Kubeadm is the progress of the node's Kubernetes steps.
	Kubeadm *KubeadmProgress `json:"kubeadm,omitempty"`
	// Kubernetes is the version kubeadm last configured the node for: by
	// the formation steps, or by a Kubernetes upgrade.
	Kubernetes string `json:"kubernetes,omitempty"`
	// Upgrade is the node's last OS upgrade and where it stands.
	Upgrade *Upgrade `json:"upgrade,omitempty"`
	// BadUpgrades are upgrades that rolled back: never retried
	// automatically.
	BadUpgrades []BadUpgrade `json:"badUpgrades,omitempty"`
	Boots       []BootRecord `json:"boots"`
}

// Where an upgrade stands.
const (
	// UpgradeInstalled: written to the other slot, which boots next on
	// trial.
	UpgradeInstalled = "installed"
	// UpgradeCommitted: the new slot passed its health check and is
	// blessed.
	UpgradeCommitted = "committed"
	// UpgradeRolledBack: the new slot failed; the node runs the old one.
	UpgradeRolledBack = "rolled-back"
)

// Upgrade is an OS upgrade from an upgrade file.
type Upgrade struct {
	// Digest identifies the upgrade file: the sha256 of its signed
	// manifest.
	Digest string `json:"digest"`
	// From and To are the versions, FromSlot and ToSlot the slots.
	From     string `json:"from"`
	To       string `json:"to"`
	FromSlot string `json:"fromSlot"`
	ToSlot   string `json:"toSlot"`
	// Source is where the file came from.
	Source string `json:"source"`
	State  string `json:"state"`
	// Reason says why it rolled back.
	Reason string `json:"reason,omitempty"`
	// Reported: the cluster's upgrade record knows it rolled back.
	Reported    bool      `json:"reported,omitempty"`
	InstalledAt time.Time `json:"installedAt"`
	DoneAt      time.Time `json:"doneAt,omitzero"`
	// InPlaceAt is when the node, still on FromSlot, began to run the
	// upgrade's Kubernetes from ToSlot in place (package inplace): the
	// upgrade changes nothing else, and ToSlot boots on trial at the
	// node's next reboot, as after an upgrade's own reboot.
	InPlaceAt time.Time `json:"inPlaceAt,omitzero"`
	// InPlaceBoot is the boot ID of that boot: until it ends, the node
	// on FromSlot runs the upgrade, not a fallback from it.
	InPlaceBoot string `json:"inPlaceBoot,omitempty"`
}

// BadUpgrade is an upgrade that rolled back.
type BadUpgrade struct {
	Digest  string    `json:"digest"`
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Bad returns the record of an upgrade that rolled back, nil when the
// digest never did.
func (j *Journal) Bad(digest string) *BadUpgrade {
	for i := range j.BadUpgrades {
		if j.BadUpgrades[i].Digest == digest {
			return &j.BadUpgrades[i]
		}
	}
	return nil
}

// Provisioned records the config a node was provisioned with.
type Provisioned struct {
	ConfigDigest string    `json:"configDigest"`
	At           time.Time `json:"at"`
	Boot         int       `json:"boot"`
}

// BootRecord is one boot's entry.
type BootRecord struct {
	Boot   int          `json:"boot"`
	BootID string       `json:"bootID"`
	Slot   string       `json:"slot"`
	Mode   string       `json:"mode,omitempty"` // provision or verify
	Steps  []StepRecord `json:"steps"`
	Result string       `json:"result,omitempty"`
}

// StepRecord is one completed step.
type StepRecord struct {
	Name   string      `json:"name"`
	Result step.Result `json:"result"`
	Detail string      `json:"detail,omitempty"`
	At     time.Time   `json:"at"`
}

const maxBoots = 100

// Current returns this boot's record, creating it for bootID if needed.
func (j *Journal) Current(bootID, slot string) *BootRecord {
	if n := len(j.Boots); n > 0 && j.Boots[n-1].BootID == bootID {
		return &j.Boots[n-1]
	}
	num := 1
	if n := len(j.Boots); n > 0 {
		num = j.Boots[n-1].Boot + 1
	}
	j.Boots = append(j.Boots, BootRecord{Boot: num, BootID: bootID, Slot: slot, Steps: []StepRecord{}})
	return &j.Boots[len(j.Boots)-1]
}

// Enrollment records the node's desired state: the config stored on
// TERRA-STATE (ConfigFile), where it came from and when. A
// node enrolls once, from the first valid config its sources offer; from
// then on it boots from the stored config, and a different config is a
// change request that needs a trusted signature (docs/config-acquisition.md).
type Enrollment struct {
	// Digest is the stored config's digest (machineconfig.Config.Digest).
	Digest string `json:"digest"`
	// Source is where the node enrolled from; At is when.
	Source string    `json:"source"`
	At     time.Time `json:"at"`
	// Change is the last signed change applied, if any.
	Change *ConfigChange `json:"change,omitempty"`
	// Generation is the highest config generation the node applied: a
	// signed change at or below it is a replay.
	Generation uint64 `json:"generation,omitempty"`
	// RevokedKeys are keys a signed change removed from trustedKeys: they
	// never verify anything on this node again.
	RevokedKeys []string `json:"revokedKeys,omitempty"`
	// Pending is a change being committed: named here before its config is
	// stored, so that a power cut between the two writes leaves a state
	// the next boot finishes (the new config is stored) or drops (it is
	// not) — see Settle.
	Pending *ConfigChange `json:"pending,omitempty"`
}

// ConfigChange is a signed config change the node applied.
type ConfigChange struct {
	Digest   string    `json:"digest"`
	Source   string    `json:"source"`
	SignedBy string    `json:"signedBy"`
	At       time.Time `json:"at"`
	// Generation is the changed config's generation.
	Generation uint64 `json:"generation,omitempty"`
	// Revokes are the keys the change removed from trustedKeys.
	Revokes []string `json:"revokes,omitempty"`
}

// Commit makes the pending change the enrolled state: its digest, its
// generation (when higher) and the keys it revoked.
func (e *Enrollment) Commit() {
	p := e.Pending
	if p == nil {
		return
	}
	e.Digest, e.Change, e.Pending = p.Digest, p, nil
	e.Generation = max(e.Generation, p.Generation)
	for _, k := range p.Revokes {
		if !slices.Contains(e.RevokedKeys, k) {
			e.RevokedKeys = append(e.RevokedKeys, k)
		}
	}
}

// What Settle did with a pending change.
const (
	SettleNothing  = ""
	SettleFinished = "finished"
	SettleDropped  = "dropped"
)

// Accepts reports whether a stored config of digest d is one the journal
// can stand behind: the enrolled config, or a change being committed.
func (e *Enrollment) Accepts(d string) bool {
	return d == e.Digest || (e.Pending != nil && d == e.Pending.Digest)
}

// Settle resolves a commit a power cut interrupted, given the digest of
// the config actually stored: a stored pending config finishes its commit,
// a pending change whose config was never stored is dropped. It returns
// what it did (SettleNothing, SettleFinished, SettleDropped) or
// ErrStoredDigest.
func (e *Enrollment) Settle(stored string) (string, error) {
	switch {
	case e.Pending != nil && stored == e.Pending.Digest:
		e.Commit()
		return SettleFinished, nil
	case stored != e.Digest:
		return SettleNothing, fmt.Errorf("%w: it has digest %s, the journal says %s", ErrStoredDigest, stored, e.Digest)
	case e.Pending != nil:
		e.Pending = nil
		return SettleDropped, nil
	}
	return SettleNothing, nil
}

// Summary is what the banner says: "from X at T".
func (e *Enrollment) Summary() string {
	s := fmt.Sprintf("from %s at %s", e.Source, e.At.UTC().Format(time.RFC3339))
	if c := e.Change; c != nil {
		s += fmt.Sprintf("; changed from %s at %s (signed by %s)", c.Source, c.At.UTC().Format(time.RFC3339), c.SignedBy)
	}
	return s
}

// KubeadmProgress records the Kubernetes steps done: after a power cut,
// formation resumes after the last step that completed.
type KubeadmProgress struct {
	// Node is the identity of the node the steps ran for: a node whose
	// identity changed starts again.
	Node string   `json:"node"`
	Done []string `json:"done"`
}

// IsDone reports whether step is done.
func (p *KubeadmProgress) IsDone(step string) bool {
	if p == nil {
		return false
	}
	for _, d := range p.Done {
		if d == step {
			return true
		}
	}
	return false
}
