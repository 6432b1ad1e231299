package upgrade

import (
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/release"
)

// Policy says whether Check may override its refusals.
type Policy int

const (
	// Refuse refuses a downgrade, the installed version again, and an
	// installed version below minFromVersion: what a node does with an
	// upgrade it finds on its own (a stick, a peer).
	Refuse Policy = iota
	// Force installs such an upgrade all the same, when an operator asks
	// for it by hand. An incompatible upgrade stays refused.
	Force
)

// Compatible returns the compatible name of an installed release, which
// an upgrade's Manifest.Compatible must equal: the image name of the
// build spec it was built from (release.json's name).
func Compatible(installed release.Release) string { return installed.Name }

// Check decides whether the upgrade m may be installed over the installed
// release. It returns nil, or an error wrapping ErrIncompatible,
// ErrInstalledVersion, ErrAlreadyInstalled, ErrDowngrade or ErrTooOld,
// checked in that order; under Force only ErrIncompatible is returned.
// m is a valid manifest (one from Open, or one that passes Validate).
func Check(installed release.Release, m Manifest, p Policy) error {
	if c := Compatible(installed); m.Compatible != c {
		return fmt.Errorf("upgrade to %s is for %q and this node is %q: %w", m.Version, m.Compatible, c, ErrIncompatible)
	}
	if p == Force {
		return nil
	}
	have, err := parseVersion(installed.Version)
	if err != nil {
		return fmt.Errorf("upgrade to %s over installed version %w: %w", m.Version, err, ErrInstalledVersion)
	}
	want, err := parseVersion(m.Version)
	if err != nil {
		return fmt.Errorf("upgrade version: %w", err)
	}
	switch c := want.compare(have); {
	case c == 0:
		return fmt.Errorf("upgrade to %s: %s is installed: %w", m.Version, installed.Version, ErrAlreadyInstalled)
	case c < 0:
		return fmt.Errorf("upgrade to %s: %s is installed: %w", m.Version, installed.Version, ErrDowngrade)
	}
	from, err := parseVersion(m.MinFromVersion)
	if err != nil {
		return fmt.Errorf("upgrade minFromVersion: %w", err)
	}
	if have.compare(from) < 0 {
		return fmt.Errorf("upgrade to %s installs over %s or later, and %s is installed: %w",
			m.Version, m.MinFromVersion, installed.Version, ErrTooOld)
	}
	return nil
}
