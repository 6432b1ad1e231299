// Package labeldisk finds the machine config on a volume whose filesystem
// label is TERRA-CONFIG (TERRA-CONFI as FAT stores it; FAT or ISO9660), as
// udev links it under /dev/disk/by-label. Hot-plugged disks appear there
// too. The volume is read through package volume: read-only, never
// mounted, every file capped.
package labeldisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
)

// MaxConfigSize is the largest machine.yaml read.
const MaxConfigSize = 1 << 20

// ErrNoConfig means the volume has no machine.yaml.
var ErrNoConfig = errors.New("no " + layout.ConfigFile + " on the config disk")

// Provider reads TERRA-CONFIG volumes linked under Dir.
type Provider struct {
	// Dir is udev's by-label directory.
	Dir string
}

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "config-disk" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	for _, label := range []string{layout.LabelConfig, layout.LabelConfigFAT} {
		dev := filepath.Join(p.Dir, label)
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		return ReadDisk(dev)
	}
	return nil, fmt.Errorf("no disk labelled %s under %s: %w", layout.LabelConfig, p.Dir, configsource.ErrAbsent)
}

// ReadDisk reads machine.yaml and, when there is one, machine.yaml.sig
// from the config volume on dev (a device or an image file). It does not
// check the signature.
func ReadDisk(dev string) (*configsource.Found, error) {
	v, err := volume.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("config disk: %w", err)
	}
	defer v.Close()
	config, err := v.ReadFile(layout.ConfigFile, MaxConfigSize)
	if errors.Is(err, volume.ErrNotFound) {
		return nil, fmt.Errorf("config disk %s: %w", dev, ErrNoConfig)
	}
	if err != nil {
		return nil, fmt.Errorf("config disk: %w", err)
	}
	sig, err := v.ReadFile(layout.ConfigSignatureFile, signature.MaxFileSize)
	if errors.Is(err, volume.ErrNotFound) {
		sig = nil
	} else if err != nil {
		return nil, fmt.Errorf("config disk: %w", err)
	}
	return &configsource.Found{Config: config, Signature: sig, Source: dev}, nil
}
