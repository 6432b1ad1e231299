// Package nocloud finds the machine config on a cloud-init NoCloud volume:
// a FAT or ISO9660 filesystem labelled CIDATA or cidata (as cloud-localds,
// Proxmox and most virtualisation tools write it), as udev links it under
// /dev/disk/by-label. It reads user-data, meta-data and network-config
// (each at most MaxFileSize) through package volume, and makes the machine
// config from them with package cloudinit.
//
// When user-data is a Terrarium machine config, it is the config, byte for
// byte, and machine.yaml.sig on the volume, if any, is its detached
// signature; meta-data and network-config are then not read. A
// #cloud-config (or no user-data) gives a config built from it, the
// meta-data and network-config; a signature cannot cover such a config,
// so a machine.yaml.sig beside one is refused.
package nocloud

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
)

// Volume labels, in the order they are looked for.
const (
	Label      = "CIDATA"
	LabelLower = "cidata"
)

// Files read from the volume.
const (
	UserDataFile      = "user-data"
	MetaDataFile      = "meta-data"
	NetworkConfigFile = "network-config"
)

// MaxFileSize is the largest user-data, meta-data or network-config read.
const MaxFileSize = 1 << 20

// Provider reads NoCloud volumes linked under Dir.
type Provider struct {
	// Dir is udev's by-label directory.
	Dir string
}

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "nocloud" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	for _, label := range []string{Label, LabelLower} {
		dev := filepath.Join(p.Dir, label)
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		return ReadVolume(dev)
	}
	return nil, fmt.Errorf("no disk labelled %s or %s under %s: %w", Label, LabelLower, p.Dir, configsource.ErrAbsent)
}

// ReadVolume makes the machine config from the NoCloud volume on dev (a
// device or an image file), see the package doc. It does not check the
// signature.
func ReadVolume(dev string) (*configsource.Found, error) {
	v, err := volume.Open(dev)
	if err != nil {
		return nil, fmt.Errorf("NoCloud volume: %w", err)
	}
	defer v.Close()
	userData, haveUser, err := readFile(v, UserDataFile, MaxFileSize)
	if err != nil {
		return nil, err
	}
	metaData, haveMeta, err := readFile(v, MetaDataFile, MaxFileSize)
	if err != nil {
		return nil, err
	}
	if !haveUser && !haveMeta {
		return nil, fmt.Errorf("NoCloud %s: %w", dev, ErrNoData)
	}
	sig, haveSig, err := readFile(v, layout.ConfigSignatureFile, signature.MaxFileSize)
	if err != nil {
		return nil, err
	}
	in := cloudinit.Input{UserData: userData}
	verbatim := cloudinit.IsMachineConfig(userData)
	if !verbatim {
		if haveSig {
			return nil, fmt.Errorf("NoCloud %s: %s signs a Terrarium machine config given as %s, but %s is not one: %w",
				dev, layout.ConfigSignatureFile, UserDataFile, UserDataFile, cloudinit.ErrUnsupported)
		}
		if in.MetaData, err = ParseMetaData(metaData); err != nil {
			return nil, fmt.Errorf("NoCloud %s: %w", dev, err)
		}
		network, haveNetwork, err := readFile(v, NetworkConfigFile, MaxFileSize)
		if err != nil {
			return nil, err
		}
		if haveNetwork {
			if in.Network, err = cloudinit.NetworkConfig(network); err != nil {
				return nil, fmt.Errorf("NoCloud %s: %w", dev, err)
			}
		}
	}
	res, err := cloudinit.MachineConfig(in)
	if err != nil {
		return nil, fmt.Errorf("NoCloud %s: %w", dev, err)
	}
	found := &configsource.Found{Config: res.Config, Source: dev + " (NoCloud)"}
	if res.Verbatim {
		found.Signature = sig
	}
	return found, nil
}

// readFile reads name from the volume; a missing file is not an error.
func readFile(v *volume.Volume, name string, limit int64) ([]byte, bool, error) {
	data, err := v.ReadFile(name, limit)
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("NoCloud volume: %w", err)
	}
	return data, true, nil
}
