package firstboot

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/ops/support"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// newStick finds a stick with one of the labels that was not there at the
// last look: each insertion is served once. served remembers the stick
// while it stays inserted.
func (r *runner) newStick(served *string, labels ...string) (media.Medium, bool) {
	m, ok := r.o.Media.Find(labels...)
	if !ok {
		*served = ""
		return media.Medium{}, false
	}
	if m.Insertion == *served {
		return media.Medium{}, false // the same stick, still inserted
	}
	*served = m.Insertion
	return m, true
}

// serveSupportStick writes a support bundle to a TERRA-SUPPORT stick, once
// per insertion, and says on the console what it wrote and that the stick
// may be removed.
// served is the stick last written to, while it stays inserted.
func (r *runner) serveSupportStick(ctx context.Context, served *string) {
	m, ok := r.newStick(served, layout.LabelSupport, layout.LabelSupportFAT)
	if !ok {
		return
	}
	r.say("support: a %s stick (%s): writing a support bundle", layout.LabelSupport, m.Device)
	var (
		name     string
		sum      support.Summary
		audit    support.AuditCopy
		auditErr error
	)
	err := r.o.Media.Use(ctx, m, true, func(dir string) error {
		p, s, err := support.WriteFile(ctx, r.o.Host, dir, support.Options{})
		name, sum = filepath.Base(p), s
		if err != nil {
			return err
		}
		// The whole audit log beside the bundle, which holds its end; a
		// stick too small for it keeps the bundle.
		audit, auditErr = support.CopyAuditLog(ctx, r.o.Host, dir, sum.Name)
		return nil
	})
	if err != nil {
		r.note("support bundle", step.Failed, err.Error())
		r.say("support: no bundle written to %s: %v", m.Device, err)
		return
	}
	detail := fmt.Sprintf("%s: %d files, %d redactions", name, len(sum.Files), sum.Redactions)
	noted := detail
	switch {
	case auditErr != nil:
		r.say("support: the audit log was not copied: %v", auditErr)
		noted += "; audit log not copied: " + auditErr.Error()
	case audit.Dir != "":
		copied := fmt.Sprintf("%s (%d files, %d bytes)", filepath.Base(audit.Dir), audit.Files, audit.Bytes)
		r.say("support: copied the audit log to %s", copied)
		noted += "; the audit log in " + copied
	}
	r.note("support bundle", step.Written, noted)
	r.say("support: wrote %s to the %s stick; it may be removed", detail, layout.LabelSupport)
}
