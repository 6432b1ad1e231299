package vmware

import (
	"fmt"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// vApp properties read from the OVF environment. An empty value counts as
// unset.
const (
	// PropConfig is a whole machine.yaml, base64 (or as PropEncoding
	// says); when set, the hand-typed properties are ignored.
	PropConfig = "terrarium.config"
	// PropEncoding is PropConfig's encoding (see Decode); unset means
	// base64.
	PropEncoding = "terrarium.config.encoding"
	// PropSignature is PropConfig's detached signature, base64.
	PropSignature = "terrarium.config.sig"

	// PropHostname is the hostname.
	PropHostname = "terrarium.hostname"
	// PropAddress is the static address in CIDR form (10.0.0.10/24), or
	// several separated by commas; unset means DHCP.
	PropAddress = "terrarium.address"
	// PropGateway is the default gateway, an address inside PropAddress's
	// subnet.
	PropGateway = "terrarium.gateway"
	// PropDNS lists name servers, separated by commas.
	PropDNS = "terrarium.dns"
	// PropSSHKey is the admin user's SSH public key (one
	// authorized_keys line).
	PropSSHKey = "terrarium.ssh-key"
)

// handTyped lists the hand-typed properties, in the order messages name
// them.
func handTyped() []string {
	return []string{PropHostname, PropAddress, PropGateway, PropDNS, PropSSHKey}
}

// FromOVFEnv returns the machine config an OVF environment document
// carries in its vApp properties (see FromProperties). where names the
// document ("guestinfo.ovfEnv") in Source and in errors.
func FromOVFEnv(data []byte, where string) (*configsource.Found, error) {
	return absentIfNone(fromOVFEnv(data, where))
}

func fromOVFEnv(data []byte, where string) (*configsource.Found, string, error) {
	props, err := ParseOVFEnv(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", where, err)
	}
	return fromProperties(props, where)
}

// FromProperties returns the machine config the vApp properties give:
// terrarium.config (with terrarium.config.sig) when set, otherwise one
// built from the hand-typed properties: hostname, DHCP on every "en*"
// link or, with terrarium.address, static addresses, gateway and name
// servers there, and the admin user with terrarium.ssh-key. A built
// config is marshalled and then parsed with machineconfig.Parse, so every
// rule of the schema applies; an invalid one wraps ErrBadProperties. No
// terrarium property set gives an error wrapping configsource.ErrAbsent.
func FromProperties(props map[string]string, where string) (*configsource.Found, error) {
	return absentIfNone(fromProperties(props, where))
}

// absentIfNone turns "nothing found, and why" into an error wrapping
// configsource.ErrAbsent.
func absentIfNone(found *configsource.Found, why string, err error) (*configsource.Found, error) {
	if found == nil && err == nil {
		return nil, fmt.Errorf("%s: %w", why, configsource.ErrAbsent)
	}
	return found, err
}

// fromProperties returns the config, or nil and why there is none, or an
// error.
func fromProperties(props map[string]string, where string) (*configsource.Found, string, error) {
	get := func(key string) string { return strings.TrimSpace(props[key]) }
	if raw := get(PropConfig); raw != "" {
		enc := get(PropEncoding)
		if enc == "" {
			enc = EncodingBase64
		}
		config, err := Decode(raw, enc, MaxConfigSize)
		if err != nil {
			return nil, "", fmt.Errorf("%s: property %s: %w", where, PropConfig, err)
		}
		found := &configsource.Found{Config: config, Source: "VMware OVF environment (" + where + ", " + PropConfig + ")"}
		if sig := get(PropSignature); sig != "" {
			if found.Signature, err = Decode(sig, EncodingBase64, MaxSignatureSize); err != nil {
				return nil, "", fmt.Errorf("%s: property %s: %w", where, PropSignature, err)
			}
		}
		return found, "", nil
	}
	var set []string
	for _, key := range handTyped() {
		if get(key) != "" {
			set = append(set, key)
		}
	}
	if len(set) == 0 {
		return nil, fmt.Sprintf("%s sets none of %s, %s", where, PropConfig, strings.Join(handTyped(), ", ")), nil
	}
	config, err := build(get)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", where, err)
	}
	return &configsource.Found{Config: config, Source: "VMware OVF environment (" + where + ", " + strings.Join(set, ", ") + ")"}, "", nil
}

// build makes machine.yaml from the hand-typed properties and checks it.
func build(get func(string) string) ([]byte, error) {
	iface := machineconfig.Interface{Name: "en*", Gateway: get(PropGateway), DNS: list(get(PropDNS))}
	if iface.Addresses = list(get(PropAddress)); len(iface.Addresses) == 0 {
		iface.DHCP = true
	}
	cfg := &machineconfig.Config{
		APIVersion: machineconfig.APIVersion,
		Kind:       machineconfig.Kind,
		Hostname:   get(PropHostname),
		Network:    machineconfig.Network{Interfaces: []machineconfig.Interface{iface}},
	}
	if key := get(PropSSHKey); key != "" {
		cfg.Admin = &machineconfig.Admin{Name: machineconfig.DefaultAdminName, SSHAuthorizedKeys: []string{key}}
	}
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("the config the properties make is %d bytes: %w (%d)", len(data), ErrTooLarge, MaxConfigSize)
	}
	if _, err := machineconfig.Parse("vApp properties", data); err != nil {
		return nil, fmt.Errorf("%w (%s → hostname, %s → network.interfaces[0].addresses, %s → .gateway, "+
			"%s → .dns, %s → admin.sshAuthorizedKeys[0]): %w", ErrBadProperties,
			PropHostname, PropAddress, PropGateway, PropDNS, PropSSHKey, err)
	}
	return data, nil
}

// list splits a comma-separated property; spaces around items are
// dropped, and so are empty items.
func list(s string) []string {
	var items []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}
