package vmdk

import "errors"

var (
	// ErrSize is returned for a raw image whose size is not a positive
	// multiple of the 512-byte sector.
	ErrSize = errors.New("raw image size is not a positive multiple of 512 bytes")
	// ErrTooLarge is returned when the VMDK would reach past what its
	// 32-bit sector offsets address (2 TiB).
	ErrTooLarge = errors.New("VMDK larger than its sector offsets address (2 TiB)")
	// ErrOption is wrapped by the error of an invalid option.
	ErrOption = errors.New("invalid VMDK option")
)
