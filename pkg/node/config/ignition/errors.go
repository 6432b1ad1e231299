package ignition

import "errors"

// ErrDrift means the host differs from what the config says: Verify found
// something not (or no longer) applied. A config that does not fit the host
// is ignitionspec.ErrConflict, from Check.
var ErrDrift = errors.New("host differs from the Ignition config")
