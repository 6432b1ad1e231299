package firstboot

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/support"
)

// serveSupportStick writes a support bundle to a TERRA-SUPPORT stick, once
// per insertion, and says on the console what it wrote and that the stick
// may be removed.
func (r *runner) serveSupportStick(ctx context.Context) {
	m, ok := r.o.Media.Find(layout.LabelSupport, layout.LabelSupportFAT)
	if !ok {
		r.supportServed = ""
		return
	}
	if m.Device == r.supportServed {
		return // the same stick, still inserted
	}
	r.supportServed = m.Device
	r.say("support: a %s stick (%s): writing a support bundle", layout.LabelSupport, m.Device)
	var (
		name string
		sum  support.Summary
	)
	err := r.o.Media.Use(ctx, m, true, func(dir string) error {
		p, s, err := support.WriteFile(ctx, r.o.Host, dir, support.Options{})
		name, sum = filepath.Base(p), s
		return err
	})
	if err != nil {
		r.step("support bundle", "failed", err.Error())
		r.say("support: no bundle written to %s: %v", m.Device, err)
		return
	}
	detail := fmt.Sprintf("%s: %d files, %d redactions", name, len(sum.Files), sum.Redactions)
	r.step("support bundle", "written", detail)
	r.say("support: wrote %s to the %s stick; it may be removed", detail, layout.LabelSupport)
}
