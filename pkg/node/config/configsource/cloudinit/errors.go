package cloudinit

import "errors"

var (
	// ErrUnsupported means the input asks for something Terrarium does not
	// do (a cloud-config key like runcmd, a bond, an IPv6 RA option). The
	// error names every such thing.
	ErrUnsupported = errors.New("not supported by Terrarium")
	// ErrMalformed means the input is not what its format says it is
	// (not YAML or JSON, a value of the wrong type, an address that is no
	// address). The error says where.
	ErrMalformed = errors.New("malformed")
	// ErrNoHostname means neither the user-data nor the meta-data names
	// the node.
	ErrNoHostname = errors.New("no hostname")
)
