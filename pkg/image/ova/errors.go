package ova

import "errors"

var (
	// ErrHardwareVersion is wrapped by the error for a virtual hardware
	// version that is not a vSphere one this package supports.
	ErrHardwareVersion = errors.New("unsupported virtual hardware version")
	// ErrName is wrapped by the error for an appliance name that cannot
	// name the OVA's files.
	ErrName = errors.New("invalid appliance name")
	// ErrDisk is wrapped by the error for a disk without content, size or
	// capacity.
	ErrDisk = errors.New("invalid disk")
	// ErrTooLarge is returned for a disk file larger than a ustar member
	// holds (8 GiB).
	ErrTooLarge = errors.New("disk file larger than a ustar member holds (8 GiB)")
	// ErrOption is wrapped by the error of an invalid option.
	ErrOption = errors.New("invalid OVA option")
)
