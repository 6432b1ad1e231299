package configdrive

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
)

// ParseMetaData reads OpenStack's meta_data.json: uuid is the instance ID;
// hostname (Nova's, like "web-1.novalocal"), or else name, names the
// node; public_keys (the server's key pair, name to key) are keys for the
// admin, in the order of their names. Other fields are ignored.
func ParseMetaData(data []byte) (cloudinit.MetaData, error) {
	var m struct {
		UUID       string            `json:"uuid"`
		Hostname   string            `json:"hostname"`
		Name       string            `json:"name"`
		PublicKeys map[string]string `json:"public_keys"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return cloudinit.MetaData{}, fmt.Errorf("meta_data.json is %w: %w", cloudinit.ErrMalformed, err)
	}
	md := cloudinit.MetaData{InstanceID: m.UUID, LocalHostname: strings.TrimSpace(m.Hostname)}
	if md.LocalHostname == "" {
		md.LocalHostname = strings.TrimSpace(m.Name)
	}
	names := make([]string, 0, len(m.PublicKeys))
	for name := range m.PublicKeys {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		md.PublicKeys = append(md.PublicKeys, m.PublicKeys[name])
	}
	return md, nil
}
