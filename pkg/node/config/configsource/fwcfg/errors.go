package fwcfg

import "errors"

var (
	// ErrTooLarge means a fw_cfg entry is larger than its cap
	// (MaxConfigSize, MaxSignatureSize).
	ErrTooLarge = errors.New("larger than allowed")
	// ErrBadSize means an entry's size file does not hold a byte count.
	ErrBadSize = errors.New("not a size")
)
