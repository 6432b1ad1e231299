package nocloud

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
)

// ParseMetaData reads NoCloud meta-data, a YAML mapping: instance-id,
// local-hostname and public-keys (a key, a list of keys, or a mapping of
// names to either) are taken; network-interfaces (the old
// /etc/network/interfaces form) is refused, use network-config instead;
// other keys say things about the instance Terrarium does not use and are
// ignored. Empty meta-data is no meta-data.
func ParseMetaData(data []byte) (cloudinit.MetaData, error) {
	var m struct {
		InstanceID        string    `yaml:"instance-id"`
		LocalHostname     string    `yaml:"local-hostname"`
		PublicKeys        yaml.Node `yaml:"public-keys"`
		NetworkInterfaces any       `yaml:"network-interfaces"`
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return cloudinit.MetaData{}, fmt.Errorf("meta-data is %w: %w", cloudinit.ErrMalformed, err)
	}
	if m.NetworkInterfaces != nil {
		return cloudinit.MetaData{}, fmt.Errorf("meta-data: network-interfaces: %w; describe the network in network-config",
			cloudinit.ErrUnsupported)
	}
	keys, err := publicKeys(&m.PublicKeys)
	if err != nil {
		return cloudinit.MetaData{}, fmt.Errorf("meta-data is %w: public-keys: %w (line %d)", cloudinit.ErrMalformed, err, m.PublicKeys.Line)
	}
	return cloudinit.MetaData{
		InstanceID:    strings.TrimSpace(m.InstanceID),
		LocalHostname: strings.TrimSpace(m.LocalHostname),
		PublicKeys:    keys,
	}, nil
}

// publicKeys reads public-keys: a string of keys, one a line; a list of
// them; or a mapping of names to either.
func publicKeys(n *yaml.Node) ([]string, error) {
	switch n.Kind {
	case 0: // absent
		return nil, nil
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil, nil
		}
		var keys []string
		for _, line := range strings.Split(n.Value, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				keys = append(keys, line)
			}
		}
		return keys, nil
	case yaml.SequenceNode:
		var keys []string
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("a list of keys holds something other than a key")
			}
			k, _ := publicKeys(item)
			keys = append(keys, k...)
		}
		return keys, nil
	case yaml.MappingNode:
		var keys []string
		for i := 1; i < len(n.Content); i += 2 {
			if v := n.Content[i]; v.Kind == yaml.ScalarNode || v.Kind == yaml.SequenceNode {
				k, err := publicKeys(v)
				if err != nil {
					return nil, err
				}
				keys = append(keys, k...)
				continue
			}
			return nil, fmt.Errorf("%s: must be a key or a list of keys", n.Content[i-1].Value)
		}
		return keys, nil
	}
	return nil, fmt.Errorf("must be a key, a list of keys, or a mapping of names to keys")
}
