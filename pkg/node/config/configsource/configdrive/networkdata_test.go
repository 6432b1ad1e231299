package configdrive

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
)

type ifaces = []machineconfig.Interface

func TestParseNetworkData(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ifaces
	}{
		{
			name: "Nova's: static with route and DNS, DHCP, an unused link",
			in:   networkJSON,
			want: ifaces{
				{MACAddress: "fa:16:3e:d4:57:ad", Addresses: []string{"10.0.0.5/24"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.2", "8.8.8.8"}},
				{MACAddress: "fa:16:3e:00:00:02", DHCP: true},
			},
		},
		{
			name: "dual stack on one link",
			in: `{"links": [{"id": "l", "type": "vif", "ethernet_mac_address": "fa:16:3e:00:00:01"}],
"networks": [
 {"type": "ipv4_dhcp", "link": "l"},
 {"type": "ipv6", "link": "l", "ip_address": "2001:db8::5", "netmask": "ffff:ffff:ffff:ffff::",
  "routes": [{"network": "::", "netmask": "::", "gateway": "2001:db8::1"}]}]}`,
			want: ifaces{{MACAddress: "fa:16:3e:00:00:01", DHCP: true, Addresses: []string{"2001:db8::5/64"}, Gateway: "2001:db8::1"}},
		},
		{
			name: "DNS without networks: DHCP on en* with it",
			in:   `{"links": [], "networks": [], "services": [{"type": "dns", "address": "9.9.9.9"}]}`,
			want: ifaces{{Name: "en*", DHCP: true, DNS: []string{"9.9.9.9"}}},
		},
		{name: "nothing", in: `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ParseNetworkData([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, n.Interfaces)
			_, err = cloudinit.MachineConfig(cloudinit.Input{MetaData: cloudinit.MetaData{LocalHostname: "n"}, Network: n})
			require.NoError(t, err, "a valid machine config network")
		})
	}
}

func TestParseNetworkDataErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		sentinel error
		want     []string
	}{
		{
			name: "bonds, VLANs, SLAAC, other routes, other services",
			in: `{"links": [
 {"id": "p0", "type": "phy", "ethernet_mac_address": "fa:16:3e:00:00:01"},
 {"id": "b0", "type": "bond", "bond_links": ["p0"], "ethernet_mac_address": "fa:16:3e:00:00:01"},
 {"id": "v0", "type": "vlan", "vlan_link": "b0", "vlan_id": 5}],
"networks": [
 {"type": "ipv4", "link": "b0", "ip_address": "10.0.0.5", "netmask": "255.255.255.0"},
 {"type": "ipv6_slaac", "link": "p0"},
 {"type": "ipv4", "link": "p0", "ip_address": "10.1.0.5", "netmask": "255.255.0.0",
  "routes": [{"network": "192.168.0.0", "netmask": "255.255.0.0", "gateway": "10.1.0.1"}], "services": [{"type": "ntp", "address": "x"}]}],
"services": [{"type": "ntp", "address": "10.0.0.1"}]}`,
			sentinel: cloudinit.ErrUnsupported,
			want: []string{"network_data.json: links[1] (b0, type bond), links[2] (v0, type vlan), networks[1] (type ipv6_slaac), " +
				"networks[2].routes[0] (to 192.168.0.0/255.255.0.0), networks[2].services[0] (type ntp), services[0] (type ntp): not supported by Terrarium"},
		},
		{
			name: "two gateways on one link",
			in: `{"links": [{"id": "l", "ethernet_mac_address": "fa:16:3e:00:00:01"}], "networks": [
 {"type": "ipv4", "link": "l", "ip_address": "10.0.0.5/24", "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.0.1"}]},
 {"type": "ipv6", "link": "l", "ip_address": "fd00::5/64", "routes": [{"network": "::", "netmask": "::", "gateway": "fd00::1"}]}]}`,
			sentinel: cloudinit.ErrUnsupported,
			want:     []string{"networks[1].routes[0] (a second default gateway on fa:16:3e:00:00:01)"},
		},
		{
			name: "malformed: links, addresses, routes, services",
			in: `{"links": [{"type": "phy"}, {"id": "nomac"}, {"id": "l", "ethernet_mac_address": "fa:16:3e:00:00:01"}, {"id": "l"}],
"networks": [
 {"type": "ipv4", "link": "missing"},
 {"type": "ipv4", "link": "l", "ip_address": "10.0.0.5"},
 {"type": "ipv4", "link": "l", "ip_address": "10.0.0.6", "netmask": "24", "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0"}]}],
"services": [{"type": "dns"}]}`,
			sentinel: cloudinit.ErrMalformed,
			want: []string{"links[0]: no id", "links[1] (nomac): no ethernet_mac_address", `links[3]: id "l" is used by an earlier link`,
				`networks[0]: link "missing" is not in links`, `networks[1]: malformed address: address "10.0.0.5" has no netmask`,
				"networks[2].routes[0]: a default route without a gateway", "services[0]: a dns service without an address"},
		},
		{name: "not JSON", in: `{"links": [`, sentinel: cloudinit.ErrMalformed, want: []string{"network_data.json is malformed"}},
		{name: "wrong types", in: `{"links": {"id": 1}}`, sentinel: cloudinit.ErrMalformed, want: []string{"network_data.json is malformed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNetworkData([]byte(tc.in))
			require.ErrorIs(t, err, tc.sentinel)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// FuzzNetworkData feeds network_data.json (the seed corpus is in
// testdata/fuzz/FuzzNetworkData) to ParseNetworkData: it never panics and
// fails only with cloudinit's sentinels; what it maps goes through
// cloudinit.MachineConfig without a panic.
func FuzzNetworkData(f *testing.F) {
	f.Add([]byte(networkJSON))
	f.Add([]byte(`{"links": [{"id": "l", "type": "bond"}], "networks": [{"type": "ipv6_slaac", "link": "l"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := ParseNetworkData(data)
		if err != nil {
			if !errors.Is(err, cloudinit.ErrMalformed) && !errors.Is(err, cloudinit.ErrUnsupported) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		_, _ = cloudinit.MachineConfig(cloudinit.Input{MetaData: cloudinit.MetaData{LocalHostname: "n"}, Network: n})
	})
}
