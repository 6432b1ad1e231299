package ignition

import (
	"path"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// Paths Terrarium writes for this package, which a config may not
// (ignitionspec refuses them).
const (
	// SudoersFile lets the config's users in the sudo group run sudo
	// without a password, which they do not have.
	SudoersFile = "/etc/sudoers.d/terrarium-ignition"
	// StateFile records what Apply did that the host cannot tell by
	// itself: the accounts it made (so that a second apply knows them
	// from the image's), the units it enabled or disabled, and the units
	// whose files changed and that wait for their restart.
	StateFile = "/var/lib/terrarium/ignition.json"
)

// unitPath is where a unit's own file goes.
func unitPath(name string) string { return path.Join(ignitionspec.UnitDir, name) }

// dropinPath is where a unit's drop-in goes.
func dropinPath(unit, dropin string) string {
	return path.Join(ignitionspec.UnitDir, unit+".d", dropin)
}
