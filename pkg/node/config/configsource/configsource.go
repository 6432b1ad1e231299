// Package configsource defines what a machine-config source is: a small
// provider that looks in one place (a labelled disk, the kernel command
// line, a file in the image) and returns the config it found there, with
// its detached signature if any. Each provider is its own package; they
// are wired, in their documented order, in one place (firstboot's
// Defaults), and firstboot's acquisition state machine probes them.
package configsource

import (
	"context"
	"errors"
)

// Found is a machine config found by a provider.
type Found struct {
	// Config is machine.yaml's content.
	Config []byte
	// Signature is the detached signature file's content (machine.yaml.sig),
	// nil when the source carries none.
	Signature []byte
	// Source says where it was found, for people: "/dev/sdb (TERRA-CONFIG)".
	Source string
}

// ErrAbsent means the provider's place holds no config. A provider wraps
// it with what it looked at ("no disk labelled TERRA-CONFIG under
// /dev/disk/by-label"), which the state machine logs when it moves on.
var ErrAbsent = errors.New("no config here")

// Provider looks for a machine config in one place.
type Provider interface {
	// Name is the provider's short name, as docs/config-sources.md lists it.
	Name() string
	// Fetch returns the config found, an error wrapping ErrAbsent when
	// there is none, or another error when the place holds something
	// unreadable (a config disk with no machine.yaml, a corrupt FAT).
	Fetch(ctx context.Context) (*Found, error)
}

// Func is a Provider made of a name and a function (tests, small sources).
type Func struct {
	N string
	F func(ctx context.Context) (*Found, error)
}

var _ Provider = Func{}

// Name implements Provider.
func (f Func) Name() string { return f.N }

// Fetch implements Provider.
func (f Func) Fetch(ctx context.Context) (*Found, error) { return f.F(ctx) }
