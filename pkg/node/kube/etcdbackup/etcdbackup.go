// Package etcdbackup keeps a control plane's etcd recoverable: scheduled
// snapshots on TERRA-STATE (etcdctl snapshot save against the local
// member), encrypted backups of the newest one for the operator
// (pkg/contract/backup), and the restore of a backup into a new init
// node's etcd data directory before kubeadm starts etcd on it (etcdutl
// snapshot restore).
//
// etcdctl and etcdutl are those of the etcd version the slot's bundle
// carries, built from the same pinned sources (components/etcd).
package etcdbackup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdmember"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

const (
	// snapshotPrefix and snapshotSuffix frame a snapshot's file name
	// around the time it was taken (snapshotTime).
	snapshotPrefix = "etcd-"
	snapshotSuffix = ".db"
	snapshotTime   = "20060102T150405Z"
	// incomingPrefix marks a snapshot being written: never listed, and
	// removed by the next Take.
	incomingPrefix = ".incoming-"

	// commandTimeout bounds one etcdctl call.
	commandTimeout = 5 * time.Minute
)

// Snapshot is one scheduled snapshot on STATE.
type Snapshot struct {
	// Path is its file, under the host's root.
	Path string
	// TakenAt is when it was taken, from its name.
	TakenAt time.Time
	// Size is its size in bytes.
	Size int64
}

// Take snapshots the local etcd member into layout.EtcdSnapshotDir and
// keeps the newest keep snapshots there (older ones are removed). A
// snapshot that would leave less than the reserve free on STATE
// (WithSpace) is refused before etcdctl runs.
func Take(ctx context.Context, h *host.Host, keep int, opts ...Option) (Snapshot, error) {
	o := newOptions(opts)
	dir := h.Path(layout.EtcdSnapshotDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	// What an earlier, interrupted Take left: old enough that no Take
	// running now (the node's schedule, `firstboot backup`) writes it.
	if old, err := filepath.Glob(filepath.Join(dir, incomingPrefix+"*")); err == nil {
		for _, p := range old {
			if fi, err := os.Stat(p); err == nil && h.Now().Sub(fi.ModTime()) > 2*commandTimeout {
				_ = os.RemoveAll(p)
			}
		}
	}
	err := diskspace.Check(o.space, diskspace.Need{
		What: "the etcd snapshot", Path: dir, Bytes: snapshotNeed(h), Reserve: o.reserve,
		Fix: "keep fewer snapshots (cluster.backup.keep), or free space on TERRA-STATE or enlarge it (the runbook's \"TERRA-STATE is full\")",
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	at := h.Now().UTC().Truncate(time.Second)
	name := snapshotPrefix + at.Format(snapshotTime) + snapshotSuffix
	// Each process writes its own incoming file.
	incoming := filepath.Join(dir, fmt.Sprintf("%s%d-%s", incomingPrefix, os.Getpid(), name))
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	args := append(etcdmember.ClientFlags(h, etcdmember.LocalEndpoint), "--command-timeout=2m", "snapshot", "save", incoming)
	if _, err := h.Output(ctx, "etcdctl", args...); err != nil {
		_ = os.Remove(incoming)
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	final := filepath.Join(dir, name)
	if err := atomicfile.Replace(incoming, final); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	fi, err := os.Stat(final)
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	if _, err := Prune(h, keep); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Path: final, TakenAt: at, Size: fi.Size()}, nil
}

// List returns the snapshots on STATE, oldest first.
func List(h *host.Host) ([]Snapshot, error) {
	dir := h.Path(layout.EtcdSnapshotDir)
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("etcd snapshots: %w", err)
	}
	var out []Snapshot
	for _, e := range entries {
		n := e.Name()
		stamp, ok := strings.CutPrefix(n, snapshotPrefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		stamp, ok = strings.CutSuffix(stamp, snapshotSuffix)
		if !ok {
			continue
		}
		t, err := time.Parse(snapshotTime, stamp)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Snapshot{Path: filepath.Join(dir, n), TakenAt: t, Size: fi.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TakenAt.Before(out[j].TakenAt) })
	return out, nil
}

// Newest is the newest snapshot on STATE; ok is false when there is none.
func Newest(h *host.Host) (s Snapshot, ok bool, err error) {
	all, err := List(h)
	if err != nil || len(all) == 0 {
		return Snapshot{}, false, err
	}
	return all[len(all)-1], true, nil
}

// Prune removes all but the newest keep snapshots and returns what it
// removed.
func Prune(h *host.Host, keep int) ([]Snapshot, error) {
	if keep < 1 {
		keep = 1
	}
	all, err := List(h)
	if err != nil {
		return nil, err
	}
	if len(all) <= keep {
		return nil, nil
	}
	gone := all[:len(all)-keep]
	for _, s := range gone {
		if err := os.Remove(s.Path); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("etcd snapshots: removing the oldest: %w", err)
		}
	}
	return gone, nil
}

// Due reports whether a scheduled snapshot is due at now: none was taken
// yet, or the newest is interval old (or from the future: a clock that
// was stepped back must not stop the schedule).
func Due(h *host.Host, interval time.Duration) (bool, error) {
	s, ok, err := Newest(h)
	if err != nil || !ok {
		return err == nil, err
	}
	age := h.Now().Sub(s.TakenAt)
	return age >= interval || age < -time.Minute, nil
}
