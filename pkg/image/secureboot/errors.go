package secureboot

import "errors"

// Sentinel errors; the errors returned wrap them with what was being read.
var (
	// ErrMalformed: a signature list, an authenticated variable or a PE
	// image does not parse.
	ErrMalformed = errors.New("malformed")
	// ErrBadSignature: an authenticated variable's signature does not
	// verify against the certificate given.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrKeySet: a key set directory is incomplete or holds a key or
	// certificate that cannot be used.
	ErrKeySet = errors.New("unusable Secure Boot key set")
)
