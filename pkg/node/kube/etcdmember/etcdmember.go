// Package etcdmember replaces a lost control plane in its cluster's etcd.
// A control plane that is gone for good (its disk dead, the machine
// stolen) stays a member of etcd: it counts towards the quorum and a new
// machine with its name and address cannot join in its place. etcd's own
// remedy for a failed member is to remove it, then add the replacement as
// a new member; Remove does the first half from a surviving control
// plane, after checking that the member is really gone and that the
// members left keep a quorum. The replacement's ordinary join does the
// second.
//
// It drives the etcdctl of the slot's bundle against the local member,
// with the API server's etcd client certificate, as etcdbackup does.
package etcdmember

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

const (
	// LocalEndpoint is the local member's client URL (kubeadm's).
	LocalEndpoint = "https://127.0.0.1:2379"
	// healthTimeout bounds one member's health check: a member that
	// cannot commit a proposal within it is not serving.
	healthTimeout = 10 * time.Second
	// commandTimeout bounds one etcdctl call.
	commandTimeout = 2 * time.Minute
)

// ErrQuorumLost means too few members answer for etcd to change its
// membership. Only a restore from a backup brings such a cluster back.
var ErrQuorumLost = errors.New("etcd has lost its quorum")

// ErrNoMember means no member has the name asked for (a worker has none).
var ErrNoMember = errors.New("no etcd member is named")

// Member is one member of the cluster's etcd.
type Member struct {
	ID         uint64
	Name       string // empty while an added member has not started
	PeerURLs   []string
	ClientURLs []string
}

// HexID is the member's ID as etcdctl takes and prints it.
func (m Member) HexID() string { return strconv.FormatUint(m.ID, 16) }

// ClientFlags are the etcdctl flags that reach endpoints with the API
// server's etcd client certificate under h's root.
func ClientFlags(h *host.Host, endpoints ...string) []string {
	return []string{
		"--endpoints=" + strings.Join(endpoints, ","),
		"--cacert=" + h.Path(layout.KubernetesPKIDir+"/etcd/ca.crt"),
		"--cert=" + h.Path(layout.KubernetesPKIDir+"/apiserver-etcd-client.crt"),
		"--key=" + h.Path(layout.KubernetesPKIDir+"/apiserver-etcd-client.key"),
	}
}

// List returns the cluster's members, as the local member knows them.
func List(ctx context.Context, h *host.Host) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	args := append(ClientFlags(h, LocalEndpoint), "--command-timeout=30s", "member", "list", "--write-out=json")
	out, err := h.Command(ctx, "etcdctl", args...)
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w: %s", err, host.LastLines(string(out), 3))
	}
	members, err := parseMemberList(out)
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	return members, nil
}

// parseMemberList reads `etcdctl member list --write-out=json`: one line
// of JSON, among whatever etcdctl logged beside it. Its IDs are JSON
// numbers (uint64, beyond a float's precision) or, with --hex,
// hexadecimal strings.
func parseMemberList(out []byte) ([]Member, error) {
	b := out
	for line := range bytes.Lines(out) {
		if bytes.HasPrefix(line, []byte("{")) && bytes.Contains(line, []byte(`"members"`)) {
			b = line
			break
		}
	}
	var list struct {
		Members []struct {
			ID         json.RawMessage `json:"ID"`
			Name       string          `json:"name"`
			PeerURLs   []string        `json:"peerURLs"`
			ClientURLs []string        `json:"clientURLs"`
		} `json:"members"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&list); err != nil {
		return nil, fmt.Errorf("etcdctl's member list is not JSON: %w", err)
	}
	if len(list.Members) == 0 {
		return nil, errors.New("etcdctl's member list names no member")
	}
	members := make([]Member, 0, len(list.Members))
	for i, m := range list.Members {
		id, err := parseID(m.ID)
		if err != nil {
			return nil, fmt.Errorf("member %d (%q): %w", i, m.Name, err)
		}
		members = append(members, Member{ID: id, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs})
	}
	return members, nil
}

func parseID(raw json.RawMessage) (uint64, error) {
	s := string(raw)
	if hex, ok := strings.CutPrefix(s, `"`); ok {
		hex, ok = strings.CutSuffix(hex, `"`)
		if !ok {
			return 0, fmt.Errorf("ID %s: not a string", s)
		}
		id, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("ID %s: %w", s, err)
		}
		return id, nil
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ID %s: %w", s, err)
	}
	return id, nil
}

// Healthy says whether a member commits a proposal within healthTimeout
// (etcdctl endpoint health at its client URLs). A member that has not
// started has no client URL and is not healthy.
func Healthy(ctx context.Context, h *host.Host, m Member) bool {
	if len(m.ClientURLs) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*healthTimeout)
	defer cancel()
	args := append(ClientFlags(h, m.ClientURLs...), "--command-timeout="+healthTimeout.String(), "endpoint", "health")
	_, err := h.Command(ctx, "etcdctl", args...)
	return err == nil
}

// Remove removes the member named name, which must be lost: it does not
// answer, and enough of the others do for a quorum of the cluster as it
// is (a membership change is itself a proposal the quorum commits).
// self is this node's name: its own member is never removed. Nothing is
// changed when Remove returns an error.
func Remove(ctx context.Context, h *host.Host, name, self string) (Member, error) {
	if name == self {
		return Member{}, fmt.Errorf("%s is this node: remove a lost control plane from another one", name)
	}
	members, err := List(ctx, h)
	if err != nil {
		return Member{}, err
	}
	i := slices.IndexFunc(members, func(m Member) bool { return m.Name == name })
	if i < 0 {
		return Member{}, fmt.Errorf("%w %s (members: %s)", ErrNoMember, name, names(members))
	}
	lost := members[i]
	if Healthy(ctx, h, lost) {
		return Member{}, fmt.Errorf("etcd member %s answers at %s: it is not lost; power the machine off (or run `firstboot reset` on it) before removing it",
			name, strings.Join(lost.ClientURLs, ","))
	}
	answering := 0
	for _, m := range members {
		if m.ID != lost.ID && Healthy(ctx, h, m) {
			answering++
		}
	}
	if quorum := len(members)/2 + 1; answering < quorum {
		return Member{}, fmt.Errorf("%w: %d of %d members answer, a membership change needs %d; restore the cluster from a backup (docs/operations/runbook.md, \"etcd lost its quorum\")",
			ErrQuorumLost, answering, len(members), quorum)
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	args := append(ClientFlags(h, LocalEndpoint), "--command-timeout=1m", "member", "remove", lost.HexID())
	if out, err := h.Command(ctx, "etcdctl", args...); err != nil {
		return Member{}, fmt.Errorf("remove etcd member %s (%s): %w: %s", name, lost.HexID(), err, host.LastLines(string(out), 3))
	}
	return lost, nil
}

// names lists members by name, an unstarted one by its ID.
func names(members []Member) string {
	var s []string
	for _, m := range members {
		if m.Name == "" {
			s = append(s, m.HexID()+" (not started)")
			continue
		}
		s = append(s, m.Name)
	}
	return strings.Join(s, ", ")
}
