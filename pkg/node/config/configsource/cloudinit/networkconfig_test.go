package cloudinit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

type ifaces = []machineconfig.Interface

func TestNetworkConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ifaces
	}{
		{
			name: "v1 static with netmask, gateway and name servers",
			in: `version: 1
config:
  - type: physical
    name: eth0
    mac_address: "52:54:00:AA:BB:CC"
    subnets:
      - type: static
        address: 192.168.1.10
        netmask: 255.255.255.0
        gateway: 192.168.1.1
        dns_nameservers: [192.168.1.2]
      - type: static6
        address: fd00::10/64
  - type: nameserver
    address: [1.1.1.1, 192.168.1.2]
`,
			want: ifaces{{MACAddress: "52:54:00:AA:BB:CC", Addresses: []string{"192.168.1.10/24", "fd00::10/64"},
				Gateway: "192.168.1.1", DNS: []string{"192.168.1.2", "1.1.1.1"}}},
		},
		{
			name: "v1 DHCP by name, and CIDR under network:",
			in: `network:
  version: 1
  config:
    - type: physical
      name: ens3
      subnets: [{type: dhcp}]
    - type: physical
      name: ens4
      subnets:
        - {type: dhcp4}
        - {type: static, address: 10.1.0.5/16}
    - type: nameserver
      address: 9.9.9.9
`,
			want: ifaces{{Name: "ens3", DHCP: true, DNS: []string{"9.9.9.9"}}, {Name: "ens4", DHCP: true, Addresses: []string{"10.1.0.5/16"}}},
		},
		{
			name: "v1 name servers alone: DHCP on en* with them",
			in:   "version: 1\nconfig:\n  - {type: nameserver, address: [10.0.0.53]}\n",
			want: ifaces{{Name: "en*", DHCP: true, DNS: []string{"10.0.0.53"}}},
		},
		{
			name: "v2 static with a default route",
			in: `version: 2
renderer: networkd
ethernets:
  id0:
    match:
      macaddress: "52:54:00:12:34:56"
    set-name: eth0
    dhcp6: false
    addresses: [10.0.0.5/24]
    routes:
      - to: default
        via: 10.0.0.1
    nameservers:
      addresses: [10.0.0.2, 10.0.0.3]
`,
			want: ifaces{{MACAddress: "52:54:00:12:34:56", Addresses: []string{"10.0.0.5/24"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.2", "10.0.0.3"}}},
		},
		{
			name: "v2 DHCP by glob, by ID, gateway4",
			in: `network:
  version: 2
  ethernets:
    all:
      match: {name: "en*"}
      dhcp4: yes
    eth1:
      addresses: ["192.168.5.5/24"]
      gateway4: 192.168.5.1
`,
			want: ifaces{{Name: "en*", DHCP: true}, {Name: "eth1", Addresses: []string{"192.168.5.5/24"}, Gateway: "192.168.5.1"}},
		},
		{name: "empty", in: "", want: nil},
		{name: "v2 without ethernets", in: "version: 2\n", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NetworkConfig([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, n.Interfaces)
			// What it maps is a valid machine config network.
			_, err = MachineConfig(Input{MetaData: MetaData{LocalHostname: "n"}, Network: n})
			require.NoError(t, err)
		})
	}
}

func TestNetworkConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		sentinel error
		want     []string
	}{
		{
			name: "v1: bonds, VLANs, RA, MTU, routes, search domains",
			in: `version: 1
config:
  - type: physical
    name: eth0
    mtu: 9000
    subnets:
      - type: ipv6_slaac
      - type: static
        address: 10.0.0.5/24
        routes: []
        dns_search: [example.com]
  - {type: bond, name: bond0}
  - {type: vlan, name: vlan5}
  - {type: nameserver, address: [1.1.1.1], search: [example.com]}
`,
			sentinel: ErrUnsupported,
			want: []string{"network-config: config[0].mtu, config[0].subnets[0] (type ipv6_slaac), config[0].subnets[1].routes, " +
				"config[0].subnets[1].dns_search, config[1] (type bond), config[2] (type vlan), config[3].search: not supported by Terrarium"},
		},
		{
			name:     "v1: a link without subnets, a second gateway",
			in:       "version: 1\nconfig:\n  - {type: physical, name: eth0}\n  - type: physical\n    name: eth1\n    subnets:\n      - {type: static, address: 10.0.0.5/24, gateway: 10.0.0.1}\n      - {type: static, address: fd00::5/64, gateway: fd00::1}\n",
			sentinel: ErrUnsupported,
			want:     []string{"config[0] (eth0, a link without subnets)", "config[1].subnets[1].gateway (a second default gateway on eth1)"},
		},
		{
			name: "v2: bonds, bridges, VLANs, DHCPv6, other routes, MTU",
			in: `version: 2
ethernets:
  eth0:
    match: {driver: virtio}
    dhcp4: true
    dhcp6: true
    mtu: 1400
    accept-ra: false
    routes: [{to: 10.9.0.0/16, via: 10.0.0.1, metric: 5}]
    nameservers: {search: [lan]}
    addresses: [{10.0.0.9/24: {label: x}}]
  eth1: {}
bonds: {bond0: {interfaces: [eth0]}}
bridges: {}
vlans: {}
`,
			sentinel: ErrUnsupported,
			want: []string{"ethernets.eth0.match.driver, ethernets.eth0.dhcp6: true, ethernets.eth0.mtu, ethernets.eth0.accept-ra, " +
				"ethernets.eth0.routes[0].metric, ethernets.eth0.routes[0] (to 10.9.0.0/16), ethernets.eth0.nameservers.search, " +
				"ethernets.eth0.addresses[0] (an address with options), ethernets.eth1 (a link without dhcp4 or addresses), bonds, bridges, vlans: not supported"},
		},
		{name: "no version", in: "config: []\n", sentinel: ErrMalformed, want: []string{"version: required"}},
		{name: "version 3", in: "version: 3\n", sentinel: ErrMalformed, want: []string{`version: "3" is not a network config version`}},
		{name: "not YAML", in: "version: [1\n", sentinel: ErrMalformed, want: []string{"network-config is malformed"}},
		{name: "not a mapping", in: "- 1\n", sentinel: ErrMalformed, want: []string{"the document: must be a mapping (line 1)"}},
		{
			name:     "bad addresses",
			in:       "version: 1\nconfig:\n  - type: physical\n    name: e\n    subnets:\n      - {type: static, address: 10.0.0.5}\n      - {type: static, address: 10.0.0.6, netmask: 255.0.255.0}\n      - {type: static, address: nope/8}\n",
			sentinel: ErrMalformed,
			want: []string{`config[0].subnets[0]: address "10.0.0.5" has no netmask`, `"255.0.255.0" is not a netmask for 10.0.0.6`,
				`"nope/8" is not an address in CIDR form`},
		},
		{
			name:     "v2 bad values",
			in:       "version: 2\nethernets:\n  e:\n    dhcp4: maybe\n    addresses: [10.0.0.1]\n    routes: [{to: default}]\n",
			sentinel: ErrMalformed,
			want:     []string{"ethernets.e.dhcp4: must be true or false (line 4)", `ethernets.e.addresses[0]: address "10.0.0.1" has no netmask`, "a default route needs via"},
		},
		{name: "a physical link without a type", in: "version: 1\nconfig: [{name: eth0}]\n", sentinel: ErrMalformed, want: []string{"config[0]: has no type"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NetworkConfig([]byte(tc.in))
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.sentinel)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestAddressCIDR(t *testing.T) {
	for _, tc := range []struct{ address, netmask, want string }{
		{"10.0.0.5", "255.255.255.0", "10.0.0.5/24"},
		{"10.0.0.5", "24", "10.0.0.5/24"},
		{"10.0.0.5/24", "", "10.0.0.5/24"},
		{"10.0.0.5/24", "255.255.255.0", "10.0.0.5/24"},
		{"2001:db8::5", "ffff:ffff:ffff:ffff::", "2001:db8::5/64"},
		{"2001:db8::5", "64", "2001:db8::5/64"},
		{"10.0.0.5", "0.0.0.0", "10.0.0.5/0"},
		{"10.0.0.5/24", "255.255.0.0", ""},
		{"10.0.0.5", "255.0.255.0", ""},
		{"10.0.0.5", "33", ""},
		{"10.0.0.5", "ffff::", ""},
		{"10.0.0.5", "", ""},
		{"fe80::1%eth0", "64", ""},
		{"x", "24", ""},
	} {
		got, err := AddressCIDR(tc.address, tc.netmask)
		if tc.want == "" {
			assert.ErrorIs(t, err, ErrMalformed, "%s %s", tc.address, tc.netmask)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}

func TestWithNameServers(t *testing.T) {
	n := machineconfig.Network{Interfaces: ifaces{{Name: "a", DHCP: true, DNS: []string{"10.0.0.1"}}, {Name: "b", DHCP: true}}}
	got := WithNameServers(n, []string{"10.0.0.1", "10.0.0.2"})
	assert.Equal(t, ifaces{{Name: "a", DHCP: true, DNS: []string{"10.0.0.1", "10.0.0.2"}}, {Name: "b", DHCP: true}}, got.Interfaces)
	assert.Equal(t, []string{"10.0.0.1"}, n.Interfaces[0].DNS, "the input is not changed")
	assert.Equal(t, n, WithNameServers(n, nil))
	assert.Equal(t, ifaces{{Name: "en*", DHCP: true, DNS: []string{"10.0.0.9"}}}, WithNameServers(machineconfig.Network{}, []string{"10.0.0.9"}).Interfaces)
}
