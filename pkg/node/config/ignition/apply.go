package ignition

import (
	"context"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
)

// PhaseName is the name of the phase that applies an Ignition config.
const PhaseName = "ignition"

// Phase applies and verifies c on h. The machine config the phase's
// functions are handed is not used: c is bound here.
func Phase(h *host.Host, c *Config) phase.Phase {
	return phase.Phase{
		Name:   PhaseName,
		Apply:  func(ctx context.Context, _ *machineconfig.Config) error { return c.Apply(ctx, h) },
		Verify: func(ctx context.Context, _ *machineconfig.Config) error { return c.Verify(ctx, h) },
	}
}

// Apply brings h to what c says: Check first, so that nothing is written
// when the host does not fit; then groups, users (with their SSH keys),
// directories, files, links and units, in that order. It writes only what
// differs and runs a command only for what is not done yet: applying the
// same config again runs none.
func (c *Config) Apply(ctx context.Context, h *host.Host) error {
	if err := c.Check(h); err != nil {
		return err
	}
	st, err := loadState(h)
	if err != nil {
		return err
	}
	a := &applier{h: h, c: c, st: st}
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"make groups", a.groups},
		{"make users", a.users},
		{"write directories, files and links", a.storage},
		{"write units", a.units},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.do(ctx); err != nil {
			return fmt.Errorf("ignition: %s: %w", s.what, err)
		}
	}
	return nil
}

// applier applies one config to one host.
type applier struct {
	h  *host.Host
	c  *Config
	st *state
}

// save records the state; Apply calls it before each act it must
// remember.
func (a *applier) save() error {
	if err := a.st.save(a.h); err != nil {
		return fmt.Errorf("record %s: %w", StateFile, err)
	}
	return nil
}
