package support

import "errors"

var (
	// ErrExcluded is recorded for a file a support bundle never holds,
	// whatever redaction would leave of it: private keys and the
	// kubeconfigs that carry them.
	ErrExcluded = errors.New("never included in a support bundle")
	// ErrWithheld is recorded for content whose secrets could not be
	// separated from it (see Redactor.Redact); the bundle holds none of it.
	ErrWithheld = errors.New("withheld: its secrets could not be redacted")

	// errNotRegular: a file to read is a device, directory or pipe.
	errNotRegular = errors.New("not a regular file")
)
