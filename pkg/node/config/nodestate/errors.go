package nodestate

import "errors"

var (
	// ErrNewerSchema means the journal was written by a newer build than
	// this one: it is not written (see the package doc).
	ErrNewerSchema = errors.New("the journal was written by a newer Terrarium than this one")

	// ErrStoredDigest means the stored config is neither the enrolled one
	// nor a pending change's.
	ErrStoredDigest = errors.New("the stored config is neither the enrolled nor a pending one")

	// ErrTooLarge means a file is larger than its accessor reads.
	ErrTooLarge = errors.New("file too large")

	// ErrNoUpgradeRequest means no `firstboot upgrade` request waits.
	ErrNoUpgradeRequest = errors.New("no upgrade request")

	// ErrBadUpgradeRequest means a request was taken (removed) but cannot
	// be read or names no upgrade file: it is to be answered as refused.
	ErrBadUpgradeRequest = errors.New("the upgrade request is unreadable")
)
