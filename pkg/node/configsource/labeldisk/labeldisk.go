// Package labeldisk finds the machine config on a disk whose filesystem
// label is TERRA-CONFIG (TERRA-CONFI as FAT stores it; FAT or ISO9660), as udev links it
// under /dev/disk/by-label. Hot-plugged disks appear there too. The disk is
// read with go-diskfs, read-only, never mounted.
package labeldisk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/configsource"
)

// Provider reads TERRA-CONFIG disks linked under Dir.
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
		files, err := configdisk.ReadFiles(dev)
		if err != nil {
			return nil, err
		}
		return &configsource.Found{Config: files.Config, Signature: files.Signature, Source: dev}, nil
	}
	return nil, fmt.Errorf("no disk labelled %s under %s: %w", layout.LabelConfig, p.Dir, configsource.ErrAbsent)
}
