package ignitionspec

import (
	"regexp"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

// unitName is what systemd takes as a unit or drop-in file name (the
// library checks the suffix); no path separator, so that it stays in its
// directory.
var unitName = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]{1,255}$`)

func (m *mapper) units(in []types.Unit) []Unit {
	var out []Unit
	for i, u := range in {
		at := index("$.systemd.units", i)
		m.checkUnitName(field(at, "name"), u.Name)
		if strings.HasPrefix(u.Name, "terrarium-") {
			m.unsupported(field(at, "name"), "%s is one of Terrarium's own units; configure Terrarium with the machine config", u.Name)
		}
		unit := Unit{Name: u.Name, Contents: str(u.Contents), Enabled: u.Enabled, Mask: u.Mask, At: at}
		for j, d := range u.Dropins {
			dat := index(field(at, "dropins"), j)
			m.checkUnitName(field(dat, "name"), d.Name)
			if d.Contents == nil {
				continue // Ignition writes none either
			}
			unit.Dropins = append(unit.Dropins, Dropin{Name: d.Name, Contents: *d.Contents})
		}
		if isTrue(u.Mask) && (unit.Contents != "" || isTrue(u.Enabled) || len(unit.Dropins) > 0) {
			m.malformed(field(at, "mask"), "a masked unit is neither written, enabled nor started; mask it, or give its contents, drop-ins and enabled")
		}
		out = append(out, unit)
	}
	return out
}

func (m *mapper) checkUnitName(at, name string) {
	if !unitName.MatchString(name) || strings.HasPrefix(name, ".") {
		m.malformed(at, "%q is not a unit file name", name)
	}
}
