package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// StatusPrefix starts the name of each node's status object:
// terrarium-upgrade-status-<node>. No node name makes it the record's or
// the lock's name.
const StatusPrefix = "terrarium-upgrade-status-"

// statusKey is the status object's key of the JSON Status.
const statusKey = "status.json"

// maxStatus bounds what a node's status object may hold.
const maxStatus = 256 << 10

// StatusName is the name of node's status object.
func StatusName(node string) string { return StatusPrefix + node }

// Status is one node's own report on upgrades, in its status object,
// which only that node's credential writes (and only a control plane's
// admin creates, with the node's rights: addons.NodeUpgradeStatus).
type Status struct {
	// Node is who wrote it: the object's node. A status naming another
	// node is no report.
	Node string `json:"node"`
	// Version is the release the node runs.
	Version string `json:"version,omitempty"`
	// Rollout is the rollout the phase is about (Rollout.ID), empty for
	// an upgrade outside a rollout.
	Rollout string `json:"rollout,omitempty"`
	// Digest and Upgrade are the upgrade the phase is about: its digest
	// and version.
	Digest  string    `json:"digest,omitempty"`
	Upgrade string    `json:"upgrade,omitempty"`
	Phase   string    `json:"phase,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	At      time.Time `json:"at,omitzero"`
	// Bad are the upgrades this node knows are bad: those that rolled
	// back on it, and the cluster's marks it read in the record. A record
	// whose bad list lost one makes no node forget it; only a verified
	// force instruction of that upgrade does.
	Bad []Bad `json:"bad,omitempty"`
}

// isNodePhase reports whether p is a node's phase in a rollout.
func isNodePhase(p string) bool {
	switch p {
	case NodeWaiting, NodeDraining, NodeInstalling, NodeTrial, NodeInPlace, NodeDone, NodeFailed, NodeRolledBack:
		return true
	}
	return false
}

// BadUpgrade is the node's mark on digest, nil when it has none.
func (s Status) BadUpgrade(digest string) *Bad {
	for i := range s.Bad {
		if s.Bad[i].Digest == digest {
			return &s.Bad[i]
		}
	}
	return nil
}

// Remember adds b to the node's marks unless it has one on b's upgrade,
// and reports whether it added it.
func (s *Status) Remember(b Bad) bool {
	if s.BadUpgrade(b.Digest) != nil {
		return false
	}
	s.Bad = append(s.Bad, b)
	return true
}

// Forget drops the node's mark on digest, and reports whether it had one.
func (s *Status) Forget(digest string) bool {
	n := len(s.Bad)
	s.Bad = slices.DeleteFunc(s.Bad, func(b Bad) bool { return b.Digest == digest })
	return len(s.Bad) != n
}

// ErrNoStatusObject means the node's status object does not exist yet. A node
// may not create it (its rights name the object; creating is not naming):
// a control plane does, with the node's rights, when it sees the node.
var ErrNoStatusObject = errors.New("this node's upgrade status object does not exist yet; a control plane creates it (and this node's right to write it) within a minute of seeing the node")

// LoadStatus reads node's status: the zero Status (naming no node) when
// the object holds none yet, ErrNoStatusObject when there is no object.
func LoadStatus(ctx context.Context, api API, node string) (Status, error) {
	s, _, err := loadStatus(ctx, api, node)
	return s, err
}

func loadStatus(ctx context.Context, api API, node string) (Status, kubeclient.ConfigMap, error) {
	m, err := api.ConfigMap(ctx, Namespace, StatusName(node))
	switch {
	case errors.Is(err, kubeclient.ErrNotFound):
		return Status{}, kubeclient.ConfigMap{}, ErrNoStatusObject
	case err != nil:
		return Status{}, kubeclient.ConfigMap{}, fmt.Errorf("read node %s's upgrade status: %w", node, err)
	}
	s, err := decodeStatus(m.Data[statusKey])
	if err != nil {
		return Status{}, m, fmt.Errorf("node %s's upgrade status (configmap %s/%s key %s): %w", node, Namespace, StatusName(node), statusKey, err)
	}
	return s, m, nil
}

// decodeStatus reads a status object's JSON; an absent one is empty.
func decodeStatus(data string) (Status, error) {
	var s Status
	if data == "" {
		return s, nil
	}
	if len(data) > maxStatus {
		return Status{}, fmt.Errorf("%d bytes, more than %d", len(data), maxStatus)
	}
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		return Status{}, fmt.Errorf("not readable: %w", err)
	}
	return s, nil
}

// UpdateStatus changes node's status with change and writes it back
// (reading it again on a conflict). change reports whether there is
// anything to write; its error leaves the status as it was. A status
// that does not read is started afresh: it is the node's own.
func UpdateStatus(ctx context.Context, api API, node string, change func(*Status) (bool, error)) (Status, error) {
	for attempt := 0; ; attempt++ {
		s, m, err := loadStatus(ctx, api, node)
		if err != nil && m.Name == "" {
			return Status{}, err
		}
		if err != nil {
			s = Status{}
		}
		s.Node = node
		write, err := change(&s)
		if err != nil || !write {
			return s, err
		}
		b, err := json.Marshal(s)
		if err != nil {
			return s, fmt.Errorf("encode node %s's upgrade status: %w", node, err)
		}
		if len(b) > maxStatus {
			return s, fmt.Errorf("node %s's upgrade status would be %d bytes, more than %d", node, len(b), maxStatus)
		}
		if m.Data == nil {
			m.Data = map[string]string{}
		}
		m.Data[statusKey] = string(b)
		_, err = api.UpdateConfigMap(ctx, m)
		switch {
		case err == nil:
			return s, nil
		case errors.Is(err, kubeclient.ErrConflict) && attempt+1 < maxAttempts:
			continue
		default:
			return s, fmt.Errorf("write node %s's upgrade status: %w", node, err)
		}
	}
}

// Statuses reads the status objects of nodes, as a control plane does to
// fold them into the record. A node whose object does not exist, or
// does not read, is in missing (the latter also in the error's text,
// logged by the caller); what was read is returned anyway.
func Statuses(ctx context.Context, api API, nodes []string) (map[string]Status, []string, error) {
	out := map[string]Status{}
	var missing []string
	var errs []error
	for _, n := range nodes {
		s, err := LoadStatus(ctx, api, n)
		switch {
		case errors.Is(err, ErrNoStatusObject):
			missing = append(missing, n)
		case err != nil:
			missing = append(missing, n)
			errs = append(errs, err)
		default:
			out[n] = s
		}
	}
	sort.Strings(missing)
	return out, missing, errors.Join(errs...)
}
