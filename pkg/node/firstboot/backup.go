package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/kube/volumebackup"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// snapshotRetry is the least time between two failed scheduled snapshots
// (etcd down, quorum lost): the snapshot controller does not hammer it.
const snapshotRetry = 5 * time.Minute

// BackupResult is what a backup wrote.
type BackupResult struct {
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

func (b BackupResult) String() string {
	what := "a fresh snapshot"
	if !b.Fresh {
		what = fmt.Sprintf("the newest scheduled snapshot (%s; etcd gave no fresh one: %v)", b.Snapshot.TakenAt.Format(time.RFC3339), b.SnapshotErr)
	}
	return fmt.Sprintf("%s (%d KiB) of %s", b.Path, b.Size>>10, what)
}

// Backup writes what the node can back up into dir (created if missing):
// on a control plane the cluster's encrypted backup, and, when its config
// opts in, the node's volumes (volumebackup): `firstboot backup`.
func Backup(ctx context.Context, o Options, dir string) ([]fmt.Stringer, error) {
	r, cfg, err := openEnrolled(o, "there is no cluster to back up")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Host.Path(dir), 0o700); err != nil {
		return nil, err
	}
	return r.writeBackups(ctx, cfg, dir)
}

// writeBackups writes into dir (a path on the host) what the node backs
// up: the cluster's backup on a control plane, the node's volumes when
// its config opts in. It returns what it wrote, in order, also when a
// later write failed.
func (r *runner) writeBackups(ctx context.Context, cfg *machineconfig.Config, dir string) ([]fmt.Stringer, error) {
	etcd, vols := r.isEtcdMember(cfg), volumebackup.Enabled(cfg)
	if !etcd && !vols {
		return nil, fmt.Errorf("this node runs no etcd member and %w: back up a control plane of the cluster", volumebackup.ErrNotEnabled)
	}
	var out []fmt.Stringer
	if etcd {
		res, err := r.writeBackup(ctx, cfg, dir)
		if err != nil {
			return out, err
		}
		r.note("backup", step.Written, res.String())
		out = append(out, res)
	}
	if vols {
		res, err := volumebackup.Write(ctx, r.o.Host, cfg, r.rel.Version, r.o.Host.Path(dir), volumebackup.WithSpace(r.o.Space, cfg.StateReserveBytes()))
		if err != nil {
			return out, err
		}
		r.note("volume backup", step.Written, res.String())
		out = append(out, res)
	}
	return out, nil
}

// isEtcdMember says the node runs an etcd member of its cluster: a
// control plane whose kubeadm etcd phase ran.
func (r *runner) isEtcdMember(cfg *machineconfig.Config) bool {
	if cfg.Cluster == nil || !cfg.Cluster.IsControlPlane() {
		return false
	}
	_, err := os.Stat(r.o.Host.Path(layout.EtcdManifest))
	return err == nil
}

// writeBackup takes a fresh snapshot (or, if etcd does not answer, uses
// the newest scheduled one) and writes its backup into dir, a path on the
// host (under its root).
func (r *runner) writeBackup(ctx context.Context, cfg *machineconfig.Config, dir string) (BackupResult, error) {
	if !r.isEtcdMember(cfg) {
		return BackupResult{}, errors.New("this node runs no etcd member: back up a control plane of the cluster")
	}
	_, keep := cfg.Cluster.BackupSchedule()
	space := etcdbackup.WithSpace(r.o.Space, cfg.StateReserveBytes())
	res := BackupResult{Fresh: true}
	snap, err := etcdbackup.Take(ctx, r.o.Host, keep, space)
	if err != nil {
		newest, ok, lerr := etcdbackup.Newest(r.o.Host)
		if lerr != nil || !ok {
			return BackupResult{}, fmt.Errorf("no snapshot to back up: %w", err)
		}
		snap, res.Fresh, res.SnapshotErr = newest, false, err
	}
	res.Snapshot = snap
	kube, _ := r.flow.KubernetesVersion() // recorded for the reader only
	info := etcdbackup.Info{Release: r.rel.Version, Kubernetes: kube}
	res.Path, err = etcdbackup.WriteBackup(r.o.Host, cfg, info, snap, r.o.Host.Path(dir), space)
	if err != nil {
		return BackupResult{}, err
	}
	if fi, err := os.Stat(res.Path); err == nil {
		res.Size = fi.Size()
	}
	return res, nil
}

// snapshotIfDue takes the control plane's scheduled etcd snapshot when
// one is due (pkg/node/kube/etcdbackup), at most every snapshotRetry after a
// failure; c keeps the time of the last failure.
func (r *runner) snapshotIfDue(ctx context.Context, cfg *machineconfig.Config, c *snapshots) {
	if !r.isEtcdMember(cfg) {
		return
	}
	now := r.o.Host.Now()
	if !c.failed.IsZero() && now.Sub(c.failed) < snapshotRetry && now.After(c.failed) {
		return
	}
	interval, keep := cfg.Cluster.BackupSchedule()
	due, err := etcdbackup.Due(r.o.Host, interval)
	if err != nil || !due {
		if !c.shown { // once a boot: the schedule fills it after
			if newest, ok, _ := etcdbackup.Newest(r.o.Host); ok {
				r.set(func(s *status.Status) { s.Backup = backupStatus(newest, interval, keep) })
				c.shown = true
			}
		}
		return
	}
	snap, err := etcdbackup.Take(ctx, r.o.Host, keep, etcdbackup.WithSpace(r.o.Space, cfg.StateReserveBytes()))
	if err != nil {
		c.failed = now
		r.note("etcd snapshot", step.Failed, err.Error())
		r.say("backup: the scheduled etcd snapshot failed (next try in %s): %v", snapshotRetry, err)
		r.pub.Publish(func(s *status.Status) { s.Backup = "the last snapshot failed: " + err.Error() })
		return
	}
	c.failed, c.shown = time.Time{}, true
	r.note("etcd snapshot", step.Taken, fmt.Sprintf("%s (%d KiB); the newest %d kept", snap.Path, snap.Size>>10, keep))
	r.pub.Publish(func(s *status.Status) { s.Backup = backupStatus(snap, interval, keep) })
}

// backupStatus is the status's backup line.
func backupStatus(s etcdbackup.Snapshot, interval time.Duration, keep int) string {
	return fmt.Sprintf("etcd snapshot %s (%d KiB), every %s, %d kept", s.TakenAt.UTC().Format(time.RFC3339), s.Size>>10, interval, keep)
}

// serveBackupStick writes the node's backups (writeBackups) to a
// TERRA-BACKUP stick inserted into the running node, once per insertion.
func (r *runner) serveBackupStick(ctx context.Context, cfg *machineconfig.Config, served *string) {
	m, ok := r.newStick(served, layout.LabelBackup, layout.LabelBackupFAT)
	if !ok {
		return
	}
	if !r.isEtcdMember(cfg) && !volumebackup.Enabled(cfg) {
		r.say("backup: a %s stick (%s) on a node without etcd whose backups carry no volumes: insert it into a control plane (volumes: make the configs with imagebuild config cluster --backup-volumes)", layout.LabelBackup, m.Device)
		return
	}
	r.say("backup: a %s stick (%s): writing the node's backups", layout.LabelBackup, m.Device)
	var written []fmt.Stringer
	err := r.o.Media.Use(ctx, m, true, func(dir string) error {
		var err error
		written, err = r.writeBackups(ctx, cfg, dir)
		return err
	})
	for i, w := range written {
		if i == len(written)-1 && err == nil {
			r.say("backup: wrote %s to the %s stick; it may be removed", w, layout.LabelBackup)
		} else {
			r.say("backup: wrote %s to the %s stick", w, layout.LabelBackup)
		}
	}
	if err != nil {
		r.note("backup", step.Failed, err.Error())
		r.say("backup: nothing more written to %s: %v", m.Device, err)
	}
}
