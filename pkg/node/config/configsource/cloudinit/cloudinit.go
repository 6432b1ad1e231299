// Package cloudinit turns what a cloud-init data source holds (user-data,
// meta-data, a network config) into a Terrarium machine config, for the
// NoCloud and OpenStack config drive sources.
//
// User-data is one of:
//
//   - a Terrarium machine config (a YAML mapping with apiVersion or kind):
//     taken byte for byte, so that a detached signature of it still
//     applies; meta-data and network config are not applied to it;
//   - a #cloud-config document, of which Terrarium takes hostname (or
//     fqdn's first label), users[].name, users[].ssh_authorized_keys and
//     ssh_authorized_keys, and refuses every other key, naming them all;
//   - empty: the meta-data's local-hostname and public keys alone.
//
// Anything else (a shell script, MIME multi-part, #include...) is refused.
//
// From a cloud-config, Terrarium's one admin user is the first users entry
// that has keys (or else the first entry; "default" is skipped), with its
// keys, the top-level ssh_authorized_keys and the meta-data's public keys.
// The hostname is the cloud-config's, or else the meta-data's
// local-hostname (its first label, in lower case). The network is the one
// the data source describes (see NetworkConfig), or else DHCP on every
// link whose name starts with "en". The config built is checked by
// machineconfig.Parse, so every rule of the schema applies.
package cloudinit

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// MetaData is what the cloud says about the instance.
type MetaData struct {
	// InstanceID identifies the instance. Terrarium does not use it: a
	// node enrolls once, whatever its instance ID later says.
	InstanceID string
	// LocalHostname names the node when the user-data does not. A fully
	// qualified name gives its first label.
	LocalHostname string
	// PublicKeys are SSH public keys (OpenStack's key pair) for the admin.
	PublicKeys []string
}

// Input is what a cloud-init data source holds.
type Input struct {
	// UserData is the user-data, empty when there is none.
	UserData []byte
	// MetaData is the parsed meta-data.
	MetaData MetaData
	// Network is the network the data source describes (NetworkConfig's,
	// or one read from OpenStack's network_data.json). Without interfaces,
	// it is DefaultNetwork.
	Network machineconfig.Network
}

// Result is the machine config made from an Input.
type Result struct {
	// Config is the machine config's YAML: the user-data itself when it is
	// a machine config (Verbatim), else the canonical form (see
	// machineconfig.Config.Marshal) of the config built.
	Config []byte
	// Verbatim says Config is the user-data byte for byte, so that a
	// detached signature of the user-data applies to it.
	Verbatim bool
}

// DefaultNetwork is the network of a node whose data source describes
// none: DHCP on every link whose name starts with "en".
func DefaultNetwork() machineconfig.Network {
	return machineconfig.Network{Interfaces: []machineconfig.Interface{{Name: "en*", DHCP: true}}}
}

// builtName names a config built from cloud-init input in its problems.
const builtName = "machine config made from the cloud-init data"

// MachineConfig makes the machine config for in, see the package doc.
func MachineConfig(in Input) (*Result, error) {
	if IsMachineConfig(in.UserData) {
		if _, err := machineconfig.Parse("user-data", in.UserData); err != nil {
			return nil, err
		}
		return &Result{Config: in.UserData, Verbatim: true}, nil
	}
	if err := otherFormat(in.UserData); err != nil {
		return nil, err
	}
	cc, err := parseCloudConfig(in.UserData)
	if err != nil {
		return nil, err
	}
	cfg := &machineconfig.Config{
		APIVersion: machineconfig.APIVersion,
		Kind:       machineconfig.Kind,
		Hostname:   cc.hostname,
		Network:    in.Network,
	}
	if cfg.Hostname == "" {
		cfg.Hostname = strings.ToLower(firstLabel(strings.TrimSpace(in.MetaData.LocalHostname)))
	}
	if cfg.Hostname == "" {
		return nil, fmt.Errorf("%w: set hostname in a #cloud-config user-data, or local-hostname in the meta-data", ErrNoHostname)
	}
	if len(cfg.Network.Interfaces) == 0 {
		cfg.Network = DefaultNetwork()
	}
	keys := uniqueKeys(append(slices.Clip(cc.keys), in.MetaData.PublicKeys...))
	if cc.admin != "" || len(keys) > 0 {
		cfg.Admin = &machineconfig.Admin{Name: cc.admin, SSHAuthorizedKeys: keys}
	}
	return validate(cfg)
}

// validate checks cfg by marshalling it and parsing it back, and returns
// its canonical form.
func validate(cfg *machineconfig.Config) (*Result, error) {
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	parsed, err := machineconfig.Parse(builtName, data)
	if err != nil {
		// Lines of a document nobody wrote help no one; the paths say
		// which setting is wrong.
		var problems strictyaml.Problems
		if errors.As(err, &problems) {
			problems = slices.Clone(problems)
			for i := range problems {
				problems[i].Line = 0
			}
			err = problems.WithFile(builtName)
		}
		return nil, err
	}
	data, err = parsed.Marshal()
	if err != nil {
		return nil, err
	}
	return &Result{Config: data}, nil
}

// IsMachineConfig reports whether user-data is a Terrarium machine config
// (a YAML mapping with apiVersion or kind, not a #cloud-config), which
// MachineConfig takes as it is.
func IsMachineConfig(userData []byte) bool {
	if isCloudConfig(userData) {
		return false
	}
	var d doc
	root, err := parseYAML("user-data", userData)
	if err != nil || root == nil || root.Kind != yaml.MappingNode {
		return false
	}
	entries := d.mapping(root, "")
	return get(entries, "apiVersion") != nil || get(entries, "kind") != nil
}

func isCloudConfig(userData []byte) bool {
	line, _, _ := bytes.Cut(userData, []byte("\n"))
	return bytes.Equal(bytes.TrimRight(line, " \t\r"), []byte("#cloud-config"))
}

// otherFormat refuses user-data that is neither empty nor a #cloud-config
// (nor a machine config, checked before), naming what it looks like.
func otherFormat(userData []byte) error {
	if len(bytes.TrimSpace(userData)) == 0 || isCloudConfig(userData) {
		return nil
	}
	for _, f := range []struct{ prefix, name string }{
		{"\x1f\x8b", "gzip-compressed"},
		{"#!", "a script"},
		{"Content-Type:", "MIME multi-part"},
		{"MIME-Version:", "MIME multi-part"},
		{"#include", "an #include list"},
		{"#cloud-config-archive", "a #cloud-config-archive"},
		{"#cloud-boothook", "a #cloud-boothook"},
		{"#part-handler", "a #part-handler"},
		{"## template:", "a template"},
	} {
		if bytes.HasPrefix(userData, []byte(f.prefix)) {
			return fmt.Errorf("user-data is %s: %w (it reads a Terrarium machine config or a #cloud-config)", f.name, ErrUnsupported)
		}
	}
	return fmt.Errorf("user-data is neither a Terrarium machine config (apiVersion: %s) nor a #cloud-config document "+
		"(which starts with the line #cloud-config): %w", machineconfig.APIVersion, ErrUnsupported)
}

// uniqueKeys drops keys listed before (the same type and key data), which
// the schema would refuse as duplicates, and blank entries.
func uniqueKeys(keys []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range keys {
		k = strings.TrimSpace(k)
		f := strings.Fields(k)
		if len(f) == 0 {
			continue
		}
		id := strings.Join(f[:min(2, len(f))], " ")
		if !seen[id] {
			seen[id] = true
			out = append(out, k)
		}
	}
	return out
}
