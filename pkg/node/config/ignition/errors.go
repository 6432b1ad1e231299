package ignition

import "errors"

var (
	// ErrMalformed means the input is not an Ignition config: not JSON, no
	// ignition.version, or something the Ignition library's validation
	// rejects. The error says where.
	ErrMalformed = errors.New("malformed")
	// ErrVersion means the config is of a spec version Terrarium does not
	// take (spec 1 or 2, an experimental 3.x): the error says how to
	// convert it.
	ErrVersion = errors.New("unsupported spec version")
	// ErrUnsupported means the config asks for something Terrarium does
	// not do (partition a disk, fetch a remote file, set a password). The
	// error names every such path and what to do instead.
	ErrUnsupported = errors.New("not supported by Terrarium")
	// ErrConflict means the config is valid but does not fit this host: a
	// user named like an account of the image, a file where a directory
	// is needed. Check reports it before anything is written.
	ErrConflict = errors.New("conflicts with this host")
	// ErrDrift means the host differs from what the config says: Verify
	// found something not (or no longer) applied.
	ErrDrift = errors.New("host differs from the Ignition config")
)
