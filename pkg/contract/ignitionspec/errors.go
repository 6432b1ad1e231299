package ignitionspec

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
	// ErrConflict means the config is valid but does not fit where it is
	// applied: beside a machine config, a user named like its admin
	// (CheckMachineConfig); on a host, a user named like an account of the
	// image, a file where a directory is needed (the node's check). Both
	// are reported before anything is written.
	ErrConflict = errors.New("conflicts with this host")
)
