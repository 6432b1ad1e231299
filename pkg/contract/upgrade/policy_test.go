package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func TestCheck(t *testing.T) {
	f, err := open(build(t, fixedKey(1)))
	require.NoError(t, err)
	manifest := func(version, minFrom string) upgrade.Manifest {
		m := f.Manifest()
		m.Version, m.MinFromVersion = version, minFrom
		return m
	}
	installed := func(name, version string) release.Release {
		return release.Release{Name: name, Version: version, Suite: "trixie"}
	}
	tests := []struct {
		name      string
		installed release.Release
		m         upgrade.Manifest
		want      error // under Refuse
		forced    error // under Force
		msg       string
	}{
		{"upgrade", installed("terrarium", "0.1.0"), manifest("0.2.0", "0.1.0"), nil, nil, ""},
		{"upgrade from later than minFrom", installed("terrarium", "0.1.5"), manifest("0.2.0", "0.1.0"), nil, nil, ""},
		{"patch upgrade", installed("terrarium", "0.2.0"), manifest("0.2.1", "0.0.0"), nil, nil, ""},
		{"release after its pre-release", installed("terrarium", "0.2.0-rc.1"), manifest("0.2.0", "0.1.0"), nil, nil, ""},
		{"pre-releases in order", installed("terrarium", "0.2.0-rc.2"), manifest("0.2.0-rc.10", "0.1.0"), nil, nil, ""},
		{"v prefix on one side", installed("terrarium", "v0.1.0"), manifest("0.2.0", "0.1.0"), nil, nil, ""},
		{"same version", installed("terrarium", "0.2.0"), manifest("0.2.0", "0.1.0"), upgrade.ErrAlreadyInstalled, nil,
			"upgrade to 0.2.0: 0.2.0 is installed: this version is already installed"},
		{"same version, other build metadata", installed("terrarium", "0.2.0+a"), manifest("0.2.0+b", "0.1.0"), upgrade.ErrAlreadyInstalled, nil, ""},
		{"same version, v prefix", installed("terrarium", "v0.2.0"), manifest("0.2.0", "0.1.0"), upgrade.ErrAlreadyInstalled, nil, ""},
		{"downgrade", installed("terrarium", "0.3.0"), manifest("0.2.0", "0.1.0"), upgrade.ErrDowngrade, nil,
			"upgrade to 0.2.0: 0.3.0 is installed: the upgrade is older"},
		{"downgrade by minor, numerically", installed("terrarium", "0.10.0"), manifest("0.9.0", "0.1.0"), upgrade.ErrDowngrade, nil, ""},
		{"to a pre-release of the installed", installed("terrarium", "0.2.0"), manifest("0.2.0-rc.1", "0.1.0"), upgrade.ErrDowngrade, nil, ""},
		{"installed too old", installed("terrarium", "0.1.0"), manifest("0.3.0", "0.2.0"), upgrade.ErrTooOld, nil,
			"upgrade to 0.3.0 installs over 0.2.0 or later, and 0.1.0 is installed: the installed version is too old"},
		{"incompatible", installed("other-appliance", "0.1.0"), manifest("0.2.0", "0.1.0"), upgrade.ErrIncompatible, upgrade.ErrIncompatible,
			`upgrade to 0.2.0 is for "terrarium" and this node is "other-appliance"`},
		{"incompatible and same", installed("other", "0.2.0"), manifest("0.2.0", "0.1.0"), upgrade.ErrIncompatible, upgrade.ErrIncompatible, ""},
		{"installed version not semver", installed("terrarium", "dev"), manifest("0.2.0", "0.1.0"), upgrade.ErrInstalledVersion, nil,
			`over installed version "dev": not MAJOR.MINOR.PATCH`},
		{"installed version empty", installed("terrarium", ""), manifest("0.2.0", "0.1.0"), upgrade.ErrInstalledVersion, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.m.Validate())
			err := upgrade.Check(tt.installed, tt.m, upgrade.Refuse)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
				assert.ErrorContains(t, err, tt.msg)
			}
			err = upgrade.Check(tt.installed, tt.m, upgrade.Force)
			if tt.forced == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.forced)
			}
		})
	}
}
