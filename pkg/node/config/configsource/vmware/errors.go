package vmware

import "errors"

var (
	// ErrBadBase64 means a value that should be base64 is not.
	ErrBadBase64 = errors.New("not valid base64")
	// ErrBadGzip means a gzip+base64 value does not hold a gzip stream.
	ErrBadGzip = errors.New("not valid gzip")
	// ErrUnknownEncoding means guestinfo.terrarium.config.encoding (or the
	// terrarium.config.encoding property) names no encoding this package
	// decodes.
	ErrUnknownEncoding = errors.New("unknown encoding")
	// ErrTooLarge means a value, a document or what a value decompresses
	// to is larger than its cap.
	ErrTooLarge = errors.New("larger than allowed")
	// ErrBadOVFEnv means an OVF environment document cannot be read.
	ErrBadOVFEnv = errors.New("not a valid OVF environment")
	// ErrBadProperties means the hand-typed vApp properties do not make a
	// valid machine config.
	ErrBadProperties = errors.New("the vApp properties do not make a valid machine config")
)
