// Package supportstick is the controller that writes a support bundle to
// each TERRA-SUPPORT stick inserted into a running node, once per
// insertion, with the control plane's whole audit log beside it, and says
// on the console what it wrote and that the stick may be removed.
package supportstick

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/support"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// StepName is the journal's step of a bundle written (step.Written) or
// not (step.Failed).
const StepName = "support bundle"

// Controller serves TERRA-SUPPORT sticks.
type Controller struct {
	Host   *host.Host
	Media  media.Media
	Report controller.Reporter

	sticks media.Insertions
}

var _ controller.Controller = (*Controller)(nil)

// Name implements controller.Controller.
func (*Controller) Name() string { return "support-stick" }

// Reconcile writes a bundle to a stick inserted since the last look. A
// stick it cannot write to is said on the console and noted; it is not
// an error of the controller.
func (c *Controller) Reconcile(ctx context.Context) error {
	m, ok := c.sticks.Next(c.Media, layout.LabelSupport, layout.LabelSupportFAT)
	if !ok {
		return nil
	}
	c.Report.Say("support: a %s stick (%s): writing a support bundle", layout.LabelSupport, m.Device)
	var (
		name     string
		sum      support.Summary
		audit    support.AuditCopy
		auditErr error
	)
	err := c.Media.Use(ctx, m, true, func(dir string) error {
		p, s, err := support.WriteFile(ctx, c.Host, dir, support.Options{})
		name, sum = filepath.Base(p), s
		if err != nil {
			return err
		}
		// The whole audit log beside the bundle, which holds its end; a
		// stick too small for it keeps the bundle.
		audit, auditErr = support.CopyAuditLog(ctx, c.Host, dir, sum.Name)
		return nil
	})
	if err != nil {
		c.Report.Note(StepName, step.Failed, err.Error())
		c.Report.Say("support: no bundle written to %s: %v", m.Device, err)
		return nil
	}
	detail := fmt.Sprintf("%s: %d files, %d redactions", name, len(sum.Files), sum.Redactions)
	noted := detail
	switch {
	case auditErr != nil:
		c.Report.Say("support: the audit log was not copied: %v", auditErr)
		noted += "; audit log not copied: " + auditErr.Error()
	case audit.Dir != "":
		copied := fmt.Sprintf("%s (%d files, %d bytes)", filepath.Base(audit.Dir), audit.Files, audit.Bytes)
		c.Report.Say("support: copied the audit log to %s", copied)
		noted += "; the audit log in " + copied
	}
	c.Report.Note(StepName, step.Written, noted)
	c.Report.Say("support: wrote %s to the %s stick; it may be removed", detail, layout.LabelSupport)
	return nil
}
