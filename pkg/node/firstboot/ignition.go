package firstboot

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/transpile"
	"github.com/terrarium-os/terrarium/pkg/node/config/ignition"
)

// IgnitionHostname is the hostname of a node enrolled from an Ignition
// config alone (Ignition has no hostname of its own, and /etc/hostname is
// the machine config's).
const IgnitionHostname = "terrarium"

// parseConfig parses what a source offered: a machine config, or a
// Fedora CoreOS or Flatcar config alone — Ignition v3 JSON, a Butane config
// (variant fcos or flatcar) or a Container Linux Config, the last two
// translated to Ignition as `imagebuild config disk --ignition` does —
// which becomes a machine config with IgnitionHostname, DHCP on every en*
// link (what Fedora CoreOS does without network configuration) and the
// Ignition config. A document with a top-level apiVersion: or kind: is a
// machine config whatever else it holds (its ignition: is also a section
// of a Container Linux Config).
func parseConfig(source string, data []byte) (*machineconfig.Config, error) {
	ign, name, err := coreOSConfig(source, data)
	if err != nil {
		return nil, err
	}
	if ign == nil {
		return machineconfig.Parse(source+":machine.yaml", data)
	}
	doc := map[string]any{
		"apiVersion": machineconfig.APIVersion,
		"kind":       machineconfig.Kind,
		"hostname":   IgnitionHostname,
		"network":    map[string]any{"interfaces": []any{map[string]any{"name": "en*", "dhcp": true}}},
		"ignition":   string(ign),
	}
	wrapped, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: wrap the Ignition config: %w", source, err)
	}
	return machineconfig.Parse(name, wrapped)
}

// coreOSConfig returns the Ignition JSON of data when it is a Fedora
// CoreOS or Flatcar config (nil when it is none, so a machine config), and
// the name its problems are told under. A Butane config or Container
// Linux Config is translated here; its problems are the translator's, at
// their line and column in it.
func coreOSConfig(source string, data []byte) ([]byte, string, error) {
	if ignitionspec.IsIgnition(data) {
		return data, source + ":config.ign", nil
	}
	var name string
	switch transpile.Detect(data) {
	case transpile.KindButane:
		name = source + ":config.bu"
	case transpile.KindCLC:
		name = source + ":config.clc"
	default:
		return nil, "", nil
	}
	// No directory of local files: a config that names one is refused
	// by the translator, as the node has nothing beside it to read.
	res, err := transpile.Translate(name, data)
	if err != nil {
		return nil, "", err
	}
	return res.Ignition, name, nil
}

// ignitionOf parses the config's Ignition part; nil when it has none.
func ignitionOf(c *machineconfig.Config) (*ignitionspec.Config, error) {
	if c.Ignition == "" {
		return nil, nil
	}
	ign, err := ignitionspec.Parse([]byte(c.Ignition))
	if err != nil {
		return nil, fmt.Errorf("ignition: %w", err)
	}
	return ign, nil
}

// admissibleIgnition checks the config's Ignition part against the config
// and this machine before anything is applied.
func (r *runner) admissibleIgnition(c *machineconfig.Config) error {
	ign, err := ignitionOf(c)
	if err != nil || ign == nil {
		return err
	}
	if err := ign.CheckMachineConfig(c); err != nil {
		return fmt.Errorf("ignition: %w", err)
	}
	if err := ignition.Check(r.o.Host, ign); err != nil {
		return fmt.Errorf("ignition: %w", err)
	}
	return nil
}
