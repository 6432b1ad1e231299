// Package step names what a step of the node came to. The node's phases
// report each long step to a host.Reporter with one of these results;
// firstboot records it in the node's journal (nodestate.StepRecord) and
// says it on the console. The values are what the journal on disk holds:
// a value, once written, never changes.
package step

// Result is what a step of the node came to: recorded in the journal
// (nodestate.StepRecord.Result) and said on the console.
type Result string

// Progress of a long step.
const (
	// Started: a long step began.
	Started Result = "started"
	// Done: a long step that Started ended well.
	Done Result = "done"
	// Waiting: the step waits for something outside the node, named in
	// the detail; it goes on by itself once that is there.
	Waiting Result = "waiting"
	// Lock: a control plane's join lock was taken, kept after a failure
	// or lost; the detail says which.
	Lock Result = "lock"
	// Retry: an attempt failed and another follows.
	Retry Result = "retry"
	// Diagnostics: the detail is what the node saw after a failed
	// attempt (logs, the state of its containers).
	Diagnostics Result = "diagnostics"
	// Warning: a check failed that the config lets the step go past.
	Warning Result = "warning"
	// Progress: the detail is a line of an install's progress.
	Progress Result = "progress"
	// Skipped: the step had nothing to do here; the detail says why.
	Skipped Result = "skipped"
	// Off: the feature the step sets up is turned off.
	Off    Result = "off"
	Failed Result = "failed"
	// Refused: nothing was done; the detail says why it was refused.
	Refused Result = "refused"
)

// Results of a phase of the node's config.
const (
	Applied  Result = "applied"
	Verified Result = "verified"
	// Healed: the phase found the node drifted from its config and
	// applied it again.
	Healed Result = "healed"
	// Reached: a phase that waits (phase.Phase.Waits) found the node not
	// there yet on a later boot and waited until it was.
	Reached Result = "reached"
	// Changed: the phase applied a config change.
	Changed Result = "changed"
	// Passed: the health check passed.
	Passed Result = "passed"
)

// Results of the node's clock, images and cluster membership.
const (
	// Stepped: the clock read before a time known to have passed and
	// was stepped forward.
	Stepped Result = "stepped"
	// Synced: the clock is in step with its source, or the images are
	// durable on disk.
	Synced Result = "synced"
	// Pulled: an image was pulled.
	Pulled Result = "pulled"
	// Present: the images were in containerd's store already.
	Present Result = "present"
	// Gone: the Node of the machine this one replaces is no longer
	// Ready, so this node joins under its name.
	Gone Result = "gone"
)

// Results of backups and restores.
const (
	// Taken: an etcd snapshot was taken.
	Taken Result = "taken"
	// Written: a backup or support bundle was written.
	Written Result = "written"
	// Snapshot: etcd's snapshot before a Kubernetes upgrade; the detail
	// is its path.
	Snapshot Result = "snapshot"
	// Restoring: a restore began (the cluster from a backup, or the
	// cluster's kubeadm objects after a failed Kubernetes upgrade).
	Restoring Result = "restoring"
	// Restored: a restore that was Restoring ended well.
	Restored Result = "restored"
	// RestoringEtcd: a failed Kubernetes upgrade puts etcd back from the
	// snapshot taken before it.
	RestoringEtcd Result = "restoring etcd"
	// RestoredEtcd: etcd is back as it was before the upgrade.
	RestoredEtcd Result = "restored etcd"
	// EtcdKept: after a failed Kubernetes upgrade etcd stays at its newer
	// version; the snapshot is kept for a restore by hand.
	EtcdKept Result = "etcd kept"
)

// Results of installs and OS upgrades.
const (
	// Checked: an upgrade was checked and its slot is about to be
	// written.
	Checked Result = "checked"
	// Writing: a slot is being written; the detail says how far.
	Writing Result = "writing"
	// Staged: a slot was written whole and boots once armed (an upgrade
	// of the cluster's rollout, written before the node is drained).
	Staged    Result = "staged"
	Installed Result = "installed"
	// InPlace: an installed upgrade's Kubernetes runs in place, from its
	// slot, without a reboot (package inplace).
	InPlace Result = "in place"
	// Published: an upgrade was published for the cluster's rollout.
	Published Result = "published"
	// Committed: the upgraded slot passed its trial boot and is kept.
	Committed Result = "committed"
	// RolledBack: the upgraded slot failed its trial boot and the node
	// fell back to the old one.
	RolledBack Result = "rolled back"
)

// ShowsInStatus reports whether the result is published in the node's
// status as it happens: what a node waits for, and the end of a wait (a
// join lock taken), besides being recorded and said on the console.
func (r Result) ShowsInStatus() bool {
	switch r {
	case Started, Waiting, Lock:
		return true
	}
	return false
}
