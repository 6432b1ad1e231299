// Package configdrive finds the machine config on an OpenStack config
// drive: an ISO9660 or FAT volume labelled config-2 (or CONFIG-2) that Nova
// attaches with `openstack server create --config-drive true`, as udev
// links it under /dev/disk/by-label. It reads, each at most MaxFileSize,
// openstack/latest/meta_data.json (the node's name and key pair, see
// ParseMetaData), openstack/latest/user_data (the --user-data file) and
// openstack/latest/network_data.json (see ParseNetworkData) through
// package volume, and makes the machine config from them with package
// cloudinit.
//
// When user_data is a Terrarium machine config, it is the config, byte for
// byte: meta_data.json's name and keys and network_data.json are not
// applied (it must say everything itself). Nova puts no machine.yaml.sig
// on the drive, so Found.Signature is always nil: signed changes come on a
// TERRA-CONFIG disk.
package configdrive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
)

// Volume labels, in the order they are looked for.
const (
	Label      = "config-2"
	LabelUpper = "CONFIG-2"
)

// Files read from the volume.
const (
	MetaDataFile    = "openstack/latest/meta_data.json"
	UserDataFile    = "openstack/latest/user_data"
	NetworkDataFile = "openstack/latest/network_data.json"
)

// MaxFileSize is the largest file read from the drive.
const MaxFileSize = 1 << 20

// Provider reads config drives linked under Dir.
type Provider struct {
	// Dir is udev's by-label directory.
	Dir string
}

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "openstack-config-drive" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	for _, label := range []string{Label, LabelUpper} {
		dev := filepath.Join(p.Dir, label)
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		return ReadDrive(dev)
	}
	return nil, fmt.Errorf("no disk labelled %s or %s under %s: %w", Label, LabelUpper, p.Dir, configsource.ErrAbsent)
}

// ReadDrive makes the machine config from the config drive on dev (a
// device or an image file), see the package doc.
func ReadDrive(dev string) (*configsource.Found, error) {
	v, err := volume.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("config drive: %w", err)
	}
	defer v.Close()
	metaData, haveMeta, err := readFile(v, MetaDataFile)
	if err != nil {
		return nil, err
	}
	if !haveMeta {
		return nil, fmt.Errorf("config drive %s: %w", dev, ErrNoMetaData)
	}
	userData, _, err := readFile(v, UserDataFile)
	if err != nil {
		return nil, err
	}
	in := cloudinit.Input{UserData: userData}
	if !cloudinit.IsMachineConfig(userData) {
		if in.MetaData, err = ParseMetaData(metaData); err != nil {
			return nil, fmt.Errorf("config drive %s: %w", dev, err)
		}
		network, haveNetwork, err := readFile(v, NetworkDataFile)
		if err != nil {
			return nil, err
		}
		if haveNetwork {
			if in.Network, err = ParseNetworkData(network); err != nil {
				return nil, fmt.Errorf("config drive %s: %w", dev, err)
			}
		}
	}
	res, err := cloudinit.MachineConfig(in)
	if err != nil {
		return nil, fmt.Errorf("config drive %s: %w", dev, err)
	}
	return &configsource.Found{Config: res.Config, Source: dev + " (OpenStack config drive)"}, nil
}

// readFile reads name from the drive; a missing file is not an error.
func readFile(v *volume.Volume, name string) ([]byte, bool, error) {
	data, err := v.ReadFile(name, MaxFileSize)
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("config drive: %w", err)
	}
	return data, true, nil
}
