// Package vmware finds the machine config of a VMware VM (vSphere, ESXi,
// Workstation), in this order:
//
//  1. guestinfo.terrarium.config, a VM advanced setting (extraConfig), with
//     guestinfo.terrarium.config.encoding ("base64", "gzip+base64" or
//     none, see Decode) and, optionally, guestinfo.terrarium.config.sig
//     (base64);
//  2. the OVF environment in guestinfo.ovfEnv (vApp options, transport
//     "VMware Tools"), its vApp properties read by FromProperties;
//  3. the OVF environment on a CD labelled OVF ENV (vApp options,
//     transport "ISO image"): ovf-env.xml, read without mounting.
//
// guestinfo is read with vmware-rpctool (package open-vm-tools); without
// it, or off VMware, steps 1 and 2 are skipped and say why (see the
// guestinfo method for the signal). The value "null" counts as unset,
// since guestinfo keys can be overwritten but not removed.
//
// Every value is outside input and capped: MaxValueSize before decoding,
// MaxConfigSize after (gzip included), MaxSignatureSize for signatures.
package vmware

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// guestinfo keys, without their "guestinfo." prefix.
const (
	ConfigKey    = "terrarium.config"
	EncodingKey  = "terrarium.config.encoding"
	SignatureKey = "terrarium.config.sig"
	OVFEnvKey    = "ovfEnv"
)

// DefaultTool is the program that reads guestinfo.
const DefaultTool = "vmware-rpctool"

// Caps.
const (
	// MaxValueSize bounds a guestinfo value or an ovf-env.xml as read:
	// room for a base64 MaxConfigSize and the rest of an OVF environment.
	MaxValueSize = 2 << 20
	// MaxConfigSize bounds a decoded (decompressed) machine config.
	MaxConfigSize = 1 << 20
	// MaxSignatureSize bounds a decoded signature.
	MaxSignatureSize = signature.MaxFileSize
)

// Provider reads the config from guestinfo and the OVF environment. Its
// zero value reads the real machine.
type Provider struct {
	// Runner runs Tool; nil means ExecRunner.
	Runner Runner
	// Tool is the guestinfo reader; empty means DefaultTool (in $PATH).
	Tool string
	// MediaDir is where OVF environment CDs are looked for by label;
	// empty means DefaultMediaDir.
	MediaDir string
	// ReadMedia reads a file from a CD; nil means ReadVolumeFile.
	ReadMedia MediaReader
	// DMIVendorFile, when set (DefaultDMIVendorFile on a node), is read
	// first: a machine whose firmware does not name VMware skips
	// guestinfo without running Tool (a running node looks every few
	// seconds). Empty means no check.
	DMIVendorFile string
}

// DefaultDMIVendorFile is where the kernel shows the firmware's system
// vendor ("VMware, Inc." on VMware).
const DefaultDMIVendorFile = "/sys/class/dmi/id/sys_vendor"

var _ configsource.Provider = Provider{}

// Name implements configsource.Provider.
func (Provider) Name() string { return "vmware" }

// Fetch implements configsource.Provider.
func (p Provider) Fetch(ctx context.Context) (*configsource.Found, error) {
	found, whyNotGuestinfo, err := p.fromGuestinfo(ctx)
	if found != nil || err != nil {
		return found, err
	}
	found, whyNotMedia, err := p.fromMedia()
	if found != nil || err != nil {
		return found, err
	}
	return nil, fmt.Errorf("%s; %s: %w", whyNotGuestinfo, whyNotMedia, configsource.ErrAbsent)
}

// fromGuestinfo reads guestinfo.terrarium.config, else the OVF
// environment in guestinfo.ovfEnv. It returns the config, or nil and why
// there is none, or an error.
func (p Provider) fromGuestinfo(ctx context.Context) (*configsource.Found, string, error) {
	if p.DMIVendorFile != "" {
		if b, err := os.ReadFile(p.DMIVendorFile); err == nil && !strings.Contains(strings.ToLower(string(b)), "vmware") {
			return nil, fmt.Sprintf("not a VMware VM (%s: %q)", p.DMIVendorFile, strings.TrimSpace(string(b))), nil
		}
	}
	raw, ok, err := p.guestinfo(ctx, ConfigKey)
	if isNoGuestinfo(err) {
		return nil, err.Error(), nil
	}
	if err != nil {
		return nil, "", err
	}
	if ok {
		found, err := p.configFromGuestinfo(ctx, raw)
		return found, "", err
	}
	env, ok, err := p.guestinfo(ctx, OVFEnvKey)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "no guestinfo." + ConfigKey + " or guestinfo." + OVFEnvKey, nil
	}
	found, why, err := fromOVFEnv([]byte(env), "guestinfo."+OVFEnvKey)
	if found == nil && err == nil {
		why = "no guestinfo." + ConfigKey + "; " + why
	}
	return found, why, err
}

// configFromGuestinfo decodes guestinfo.terrarium.config, whose raw value
// is raw, and reads its signature.
func (p Provider) configFromGuestinfo(ctx context.Context, raw string) (*configsource.Found, error) {
	enc, _, err := p.guestinfo(ctx, EncodingKey)
	if err != nil {
		return nil, err
	}
	config, err := Decode(raw, enc, MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("guestinfo.%s: %w", ConfigKey, err)
	}
	found := &configsource.Found{Config: config, Source: "VMware guestinfo (guestinfo." + ConfigKey + ")"}
	sig, ok, err := p.guestinfo(ctx, SignatureKey)
	if err != nil {
		return nil, err
	}
	if ok {
		if found.Signature, err = Decode(sig, EncodingBase64, MaxSignatureSize); err != nil {
			return nil, fmt.Errorf("guestinfo.%s: %w", SignatureKey, err)
		}
	}
	return found, nil
}
