package ignitionspec

import (
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// CheckMachineConfig refuses what an Ignition config given beside a
// machine config would fight it over: the machine config's admin user,
// which its own phase makes and whose SSH keys and sudo rule it writes.
// Files the machine config writes (/etc/hostname, the network's) are
// refused by Parse already. Its error is Problems of kind ErrConflict.
func (c *Config) CheckMachineConfig(mc *machineconfig.Config) error {
	var ps problems
	if mc == nil || mc.Admin == nil || mc.Admin.Name == "" {
		return nil
	}
	admin := mc.Admin.Name
	for _, u := range c.Users {
		if u.Name == admin {
			ps.add(ErrConflict, field(u.At, "name"), "%s is the machine config's admin; list its keys under admin.sshAuthorizedKeys there, "+
				"or give this user another name", admin)
		}
	}
	for _, g := range c.Groups {
		if g.Name == admin {
			ps.add(ErrConflict, field(g.At, "name"), "%s is the machine config's admin, whose group useradd makes; choose another name", admin)
		}
	}
	return ps.err()
}
