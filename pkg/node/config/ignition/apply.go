// Package ignition applies the plan of an Ignition config
// (pkg/contract/ignitionspec parses and checks it, with no host) to a
// machine with a read-only root: files, directories and symlinks under the
// writable trees, users with SSH keys, groups, and systemd units with
// drop-ins.
//
// Check tells whether a plan fits a host (account names the image already
// has, a file where a directory is needed); Apply checks, then writes only
// what differs, runs daemon-reload only when a unit file changed, restarts
// only the units whose own files changed, and enables (and starts, as they
// would have started had Ignition run before the first boot), disables,
// masks or unmasks as asked; Verify only looks. A config is applied again
// at every boot: a second apply of the same config runs no command. What a
// later config no longer names is left in place. Phase is all of this as
// firstboot's phase.
//
// Users are made with useradd, their passwords locked; their SSH keys
// become ~/.ssh/authorized_keys, and those in the sudo group may run sudo
// without a password (SudoersFile), as the machine config's admin does.
package ignition

import (
	"context"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
)

// PhaseName is the name of the phase that applies an Ignition config.
const PhaseName = "ignition"

// Phase applies and verifies c on h. The machine config the phase's
// functions are handed is not used: c is bound here.
func Phase(h *host.Host, c *ignitionspec.Config) phase.Phase {
	return phase.Phase{
		Name:   PhaseName,
		Apply:  func(ctx context.Context, _ *machineconfig.Config) error { return Apply(ctx, h, c) },
		Verify: func(ctx context.Context, _ *machineconfig.Config) error { return Verify(ctx, h, c) },
	}
}

// Apply brings h to what c says: Check first, so that nothing is written
// when the host does not fit; then groups, users (with their SSH keys),
// directories, files, links and units, in that order. It writes only what
// differs and runs a command only for what is not done yet: applying the
// same config again runs none.
func Apply(ctx context.Context, h *host.Host, c *ignitionspec.Config) error {
	if err := Check(h, c); err != nil {
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
	c  *ignitionspec.Config
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
