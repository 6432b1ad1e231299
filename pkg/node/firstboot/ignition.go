package firstboot

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/ignition"
)

// IgnitionHostname is the hostname of a node enrolled from an Ignition
// config alone (Ignition has no hostname of its own, and /etc/hostname is
// the machine config's).
const IgnitionHostname = "terrarium"

// parseConfig parses what a source offered: a machine config, or an
// Ignition v3 config alone, which becomes a machine config with
// IgnitionHostname, DHCP on every en* link (what Fedora CoreOS does
// without network configuration) and the Ignition config.
func parseConfig(source string, data []byte) (*machineconfig.Config, error) {
	if !ignitionspec.IsIgnition(data) {
		return machineconfig.Parse(source+":machine.yaml", data)
	}
	doc := map[string]any{
		"apiVersion": machineconfig.APIVersion,
		"kind":       machineconfig.Kind,
		"hostname":   IgnitionHostname,
		"network":    map[string]any{"interfaces": []any{map[string]any{"name": "en*", "dhcp": true}}},
		"ignition":   string(data),
	}
	wrapped, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: wrap the Ignition config: %w", source, err)
	}
	return machineconfig.Parse(source+":config.ign", wrapped)
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
