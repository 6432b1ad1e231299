// Package backupstick is the controller that writes the node's backups
// (pkg/node/ops/nodebackup) to each TERRA-BACKUP stick inserted into a
// running node, once per insertion, and says on the console what it wrote
// and that the stick may be removed.
package backupstick

import (
	"context"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/ops/nodebackup"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// StepName is the journal's step of a backup that failed (step.Failed);
// what was written is the writer's (nodebackup's steps).
const StepName = nodebackup.StepBackup

// Controller serves TERRA-BACKUP sticks.
type Controller struct {
	Media  media.Media
	Backup *nodebackup.Writer
	// Config is the config the node runs now.
	Config func() *machineconfig.Config
	Report controller.Reporter

	sticks media.Insertions
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "backup-stick" }

// Reconcile writes the node's backups to a stick inserted since the last
// look. A stick it cannot write to is said on the console and noted; it
// is not an error of the controller.
func (c *Controller) Reconcile(ctx context.Context) error {
	m, ok := c.sticks.Next(c.Media, layout.LabelBackup, layout.LabelBackupFAT)
	if !ok {
		return nil
	}
	cfg := c.Config()
	if !c.Backup.Backs(cfg) {
		c.Report.Say("backup: a %s stick (%s) on a node without etcd whose backups carry no volumes: insert it into a control plane (volumes: make the configs with imagebuild config cluster --backup-volumes)", layout.LabelBackup, m.Device)
		return nil
	}
	c.Report.Say("backup: a %s stick (%s): writing the node's backups", layout.LabelBackup, m.Device)
	var written []fmt.Stringer
	err := c.Media.Use(ctx, m, true, func(dir string) error {
		var err error
		written, err = c.Backup.WriteAll(ctx, cfg, dir)
		return err
	})
	for i, w := range written {
		if i == len(written)-1 && err == nil {
			c.Report.Say("backup: wrote %s to the %s stick; it may be removed", w, layout.LabelBackup)
		} else {
			c.Report.Say("backup: wrote %s to the %s stick", w, layout.LabelBackup)
		}
	}
	if err != nil {
		c.Report.Note(StepName, step.Failed, err.Error())
		c.Report.Say("backup: nothing more written to %s: %v", m.Device, err)
	}
	return nil
}
