// Package snapshots is the controller that takes a control plane's
// scheduled etcd snapshots (pkg/node/kube/etcdbackup) when one is due, at
// most every Retry after a failure, and shows the newest in the node's
// status.
package snapshots

import (
	"context"
	"fmt"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/etcdbackup"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
	"github.com/terrarium-os/terrarium/pkg/node/ops/nodebackup"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Retry is the least time between two failed scheduled snapshots (etcd
// down, quorum lost): the controller does not hammer it.
const Retry = 5 * time.Minute

// StepName is the journal's step of a snapshot taken (step.Taken) or not
// (step.Failed).
const StepName = "etcd snapshot"

// Controller takes the scheduled snapshots.
type Controller struct {
	Host  *host.Host
	Space diskspace.FS
	// Config is the config the node runs now.
	Config func() *machineconfig.Config
	Status *status.Publisher
	Report controller.Reporter

	// failed is when the last scheduled snapshot failed (zero after a
	// success); shown, that the status shows the newest snapshot.
	failed time.Time
	shown  bool
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "etcd-snapshots" }

// Reconcile takes a snapshot when one is due on an etcd member. A failed
// snapshot is said, noted and shown in the status; it is not an error of
// the controller.
func (c *Controller) Reconcile(ctx context.Context) error {
	cfg := c.Config()
	if !nodebackup.IsEtcdMember(c.Host, cfg) {
		return nil
	}
	now := c.Host.Now()
	if !c.failed.IsZero() && now.Sub(c.failed) < Retry && now.After(c.failed) {
		return nil
	}
	interval, keep := cfg.Cluster.BackupSchedule()
	due, err := etcdbackup.Due(c.Host, interval)
	if err != nil || !due {
		if !c.shown { // once a boot: the schedule fills it after
			if newest, ok, _ := etcdbackup.Newest(c.Host); ok {
				c.Status.Update(func(s *status.Status) { s.Backup = Line(newest, interval, keep) })
				c.shown = true
			}
		}
		return nil
	}
	snap, err := etcdbackup.Take(ctx, c.Host, keep, etcdbackup.WithSpace(c.Space, cfg.StateReserveBytes()))
	if err != nil {
		c.failed = now
		c.Report.Note(StepName, step.Failed, err.Error())
		c.Report.Say("backup: the scheduled etcd snapshot failed (next try in %s): %v", Retry, err)
		c.Status.Publish(func(s *status.Status) { s.Backup = "the last snapshot failed: " + err.Error() })
		return nil
	}
	c.failed, c.shown = time.Time{}, true
	c.Report.Note(StepName, step.Taken, fmt.Sprintf("%s (%d KiB); the newest %d kept", snap.Path, snap.Size>>10, keep))
	c.Status.Publish(func(s *status.Status) { s.Backup = Line(snap, interval, keep) })
	return nil
}

// Line is the status's backup line of the newest snapshot.
func Line(s etcdbackup.Snapshot, interval time.Duration, keep int) string {
	return fmt.Sprintf("etcd snapshot %s (%d KiB), every %s, %d kept", s.TakenAt.UTC().Format(time.RFC3339), s.Size>>10, interval, keep)
}
