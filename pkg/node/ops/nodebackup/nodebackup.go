// Package nodebackup writes what a node backs up into a directory: on a
// control plane the cluster's encrypted backup (pkg/node/kube/etcdbackup:
// a fresh etcd snapshot, or the newest scheduled one when etcd does not
// answer), and, when its config opts in, the node's volumes
// (pkg/node/kube/volumebackup). `firstboot backup` and the TERRA-BACKUP
// stick's controller write through it.
package nodebackup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Journal steps of a backup written (step.Written).
const (
	StepBackup       = "backup"
	StepVolumeBackup = "volume backup"
)

// ErrNoEtcd means the node runs no etcd member: its cluster is backed up
// on a control plane.
var ErrNoEtcd = errors.New("this node runs no etcd member: back up a control plane of the cluster")

// Writer writes a node's backups.
type Writer struct {
	Host *host.Host
	// Space tells free space, checked before a write (with the config's
	// reserve for etcd).
	Space diskspace.FS
	// Release is the running release's version, and Kubernetes tells
	// the Kubernetes it runs; both are recorded in a backup for its
	// reader only.
	Release    string
	Kubernetes func() (string, error)
	// Note records each backup written in the journal; nil records none.
	Note func(name string, result step.Result, detail string)
}

// Result is what a backup of the cluster wrote.
type Result struct {
	// Path is the backup file; Size its size in bytes.
	Path string
	Size int64
	// Snapshot is the snapshot it holds; Fresh says it was taken for this
	// backup, not the newest scheduled one (etcd did not answer).
	Snapshot etcdbackup.Snapshot
	Fresh    bool
	// SnapshotErr is why no fresh snapshot was taken, when Fresh is
	// false.
	SnapshotErr error
}

func (b Result) String() string {
	what := "a fresh snapshot"
	if !b.Fresh {
		what = fmt.Sprintf("the newest scheduled snapshot (%s; etcd gave no fresh one: %v)", b.Snapshot.TakenAt.Format(time.RFC3339), b.SnapshotErr)
	}
	return fmt.Sprintf("%s (%d KiB) of %s", b.Path, b.Size>>10, what)
}

// IsEtcdMember says the node runs an etcd member of its cluster: a
// control plane whose kubeadm etcd phase ran.
func IsEtcdMember(h *host.Host, cfg *machineconfig.Config) bool {
	if cfg.Cluster == nil || !cfg.Cluster.IsControlPlane() {
		return false
	}
	_, err := os.Stat(h.Path(layout.EtcdManifest))
	return err == nil
}

// Backs says the node has something to back up: an etcd member, or
// volumes its config opts in to back up.
func (w *Writer) Backs(cfg *machineconfig.Config) bool {
	return IsEtcdMember(w.Host, cfg) || volumebackup.Enabled(cfg)
}

// WriteAll writes into dir (a path on the host) what the node backs up:
// the cluster's backup on a control plane, the node's volumes when its
// config opts in. It returns what it wrote, in order, also when a later
// write failed.
func (w *Writer) WriteAll(ctx context.Context, cfg *machineconfig.Config, dir string) ([]fmt.Stringer, error) {
	etcd, vols := IsEtcdMember(w.Host, cfg), volumebackup.Enabled(cfg)
	if !etcd && !vols {
		return nil, fmt.Errorf("this node runs no etcd member and %w: back up a control plane of the cluster", volumebackup.ErrNotEnabled)
	}
	var out []fmt.Stringer
	if etcd {
		res, err := w.WriteCluster(ctx, cfg, dir)
		if err != nil {
			return out, err
		}
		w.note(StepBackup, step.Written, res.String())
		out = append(out, res)
	}
	if vols {
		res, err := volumebackup.Write(ctx, w.Host, cfg, w.Release, w.Host.Path(dir), volumebackup.WithSpace(w.Space, cfg.StateReserveBytes()))
		if err != nil {
			return out, err
		}
		w.note(StepVolumeBackup, step.Written, res.String())
		out = append(out, res)
	}
	return out, nil
}

// WriteCluster takes a fresh snapshot (or, if etcd does not answer, uses
// the newest scheduled one) and writes its backup into dir, a path on the
// host (under its root).
func (w *Writer) WriteCluster(ctx context.Context, cfg *machineconfig.Config, dir string) (Result, error) {
	if !IsEtcdMember(w.Host, cfg) {
		return Result{}, ErrNoEtcd
	}
	_, keep := cfg.Cluster.BackupSchedule()
	space := etcdbackup.WithSpace(w.Space, cfg.StateReserveBytes())
	res := Result{Fresh: true}
	snap, err := etcdbackup.Take(ctx, w.Host, keep, space)
	if err != nil {
		newest, ok, lerr := etcdbackup.Newest(w.Host)
		if lerr != nil || !ok {
			return Result{}, fmt.Errorf("no snapshot to back up: %w", err)
		}
		snap, res.Fresh, res.SnapshotErr = newest, false, err
	}
	res.Snapshot = snap
	var kube string
	if w.Kubernetes != nil {
		kube, _ = w.Kubernetes() // recorded for the reader only
	}
	info := etcdbackup.Info{Release: w.Release, Kubernetes: kube}
	res.Path, err = etcdbackup.WriteBackup(w.Host, cfg, info, snap, w.Host.Path(dir), space)
	if err != nil {
		return Result{}, err
	}
	if fi, err := os.Stat(res.Path); err == nil {
		res.Size = fi.Size()
	}
	return res, nil
}

func (w *Writer) note(name string, result step.Result, detail string) {
	if w.Note != nil {
		w.Note(name, result, detail)
	}
}
