package configdrive

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
)

// networkDataTakes says what ParseNetworkData maps, for errors.
const networkDataTakes = "links chosen by ethernet_mac_address; networks of type ipv4_dhcp, and ipv4 or ipv6 " +
	"with ip_address, netmask and a default route; dns services"

// networkData is the part of network_data.json Terrarium reads.
type networkData struct {
	Links    []link    `json:"links"`
	Networks []network `json:"networks"`
	Services []service `json:"services"`
}

type link struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	MAC  string `json:"ethernet_mac_address"`
}

type network struct {
	Type      string    `json:"type"`
	Link      string    `json:"link"`
	IPAddress string    `json:"ip_address"`
	Netmask   string    `json:"netmask"`
	Routes    []route   `json:"routes"`
	Services  []service `json:"services"`
}

type route struct {
	Network string `json:"network"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
}

type service struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// ParseNetworkData maps OpenStack's network_data.json to the machine
// config's network. Each link a network uses is chosen by its
// ethernet_mac_address and takes its networks: ipv4_dhcp turns on DHCPv4;
// ipv4 and ipv6 add ip_address/netmask, their default route (network
// 0.0.0.0 or ::) the gateway, one per link; dns services, the network's
// own go to its link, the top-level ones to the first link. Links no
// network uses are left alone (their MTU and other details are not
// applied). Bond and VLAN links, other network types (ipv6_slaac,
// ipv6_dhcpv6-*...), other routes and other services are errors wrapping
// cloudinit.ErrUnsupported that name each. Without networks, the result
// has no interfaces, which cloudinit.MachineConfig replaces with DHCP on
// every "en*" link.
func ParseNetworkData(data []byte) (machineconfig.Network, error) {
	var nd networkData
	if err := json.Unmarshal(data, &nd); err != nil {
		return machineconfig.Network{}, fmt.Errorf("network_data.json is %w: %w", cloudinit.ErrMalformed, err)
	}
	var m mapper
	links := m.links(nd.Links)
	var n machineconfig.Network
	ifaceOf := map[string]int{} // link ID → index in n.Interfaces
	for i, nw := range nd.Networks {
		p := fmt.Sprintf("networks[%d]", i)
		l, ok := links[nw.Link]
		switch {
		case !ok:
			m.malformedf("%s: link %q is not in links", p, nw.Link)
			continue
		case l.Type == "bond" || l.Type == "vlan":
			continue // refused with the link
		}
		idx, ok := ifaceOf[nw.Link]
		if !ok {
			idx = len(n.Interfaces)
			ifaceOf[nw.Link] = idx
			n.Interfaces = append(n.Interfaces, machineconfig.Interface{MACAddress: l.MAC})
		}
		m.network(p, nw, &n.Interfaces[idx])
	}
	dns := m.dns("services", nd.Services)
	if err := m.err(); err != nil {
		return machineconfig.Network{}, err
	}
	return cloudinit.WithNameServers(n, dns), nil
}

// mapper collects what cannot be mapped and what is malformed, so that one
// error lists them all.
type mapper struct {
	unsupported, malformed []string
}

func (m *mapper) unsupportedf(format string, args ...any) {
	m.unsupported = append(m.unsupported, fmt.Sprintf(format, args...))
}

func (m *mapper) malformedf(format string, args ...any) {
	m.malformed = append(m.malformed, fmt.Sprintf(format, args...))
}

func (m *mapper) err() error {
	var errs []error
	if len(m.malformed) > 0 {
		errs = append(errs, fmt.Errorf("network_data.json is %w: %s", cloudinit.ErrMalformed, strings.Join(m.malformed, "; ")))
	}
	if len(m.unsupported) > 0 {
		errs = append(errs, fmt.Errorf("network_data.json: %s: %w (it takes %s)",
			strings.Join(m.unsupported, ", "), cloudinit.ErrUnsupported, networkDataTakes))
	}
	return errors.Join(errs...)
}

// links indexes the links by ID, refusing bonds and VLANs.
func (m *mapper) links(links []link) map[string]link {
	byID := map[string]link{}
	for i, l := range links {
		p := fmt.Sprintf("links[%d]", i)
		_, dup := byID[l.ID]
		switch {
		case l.ID == "":
			m.malformedf("%s: no id", p)
		case dup:
			m.malformedf("%s: id %q is used by an earlier link", p, l.ID)
		case l.Type == "bond" || l.Type == "vlan":
			m.unsupportedf("%s (%s, type %s)", p, l.ID, l.Type)
			byID[l.ID] = l
		case l.MAC == "":
			m.malformedf("%s (%s): no ethernet_mac_address", p, l.ID)
		default:
			byID[l.ID] = l
		}
	}
	return byID
}

// network adds one network to its link's interface.
func (m *mapper) network(p string, nw network, iface *machineconfig.Interface) {
	switch nw.Type {
	case "ipv4_dhcp":
		iface.DHCP = true
	case "ipv4", "ipv6":
		addr, err := cloudinit.AddressCIDR(nw.IPAddress, nw.Netmask)
		if err != nil {
			m.malformedf("%s: %v", p, err)
			break
		}
		iface.Addresses = append(iface.Addresses, addr)
		m.routes(p, nw.Routes, iface)
	default:
		m.unsupportedf("%s (type %s)", p, nw.Type)
	}
	iface.DNS = appendNew(iface.DNS, m.dns(p+".services", nw.Services)...)
}

// routes takes the default route as the gateway and refuses the others.
func (m *mapper) routes(p string, routes []route, iface *machineconfig.Interface) {
	for j, r := range routes {
		rp := fmt.Sprintf("%s.routes[%d]", p, j)
		isDefault := (r.Network == "0.0.0.0" || r.Network == "::") &&
			(r.Netmask == "0.0.0.0" || r.Netmask == "::" || r.Netmask == "0" || r.Netmask == "")
		switch {
		case !isDefault:
			m.unsupportedf("%s (to %s/%s)", rp, r.Network, r.Netmask)
		case r.Gateway == "":
			m.malformedf("%s: a default route without a gateway", rp)
		case iface.Gateway == "" || iface.Gateway == r.Gateway:
			iface.Gateway = r.Gateway
		default:
			m.unsupportedf("%s (a second default gateway on %s)", rp, iface.MACAddress)
		}
	}
}

// dns returns the addresses of dns services, refusing other services.
func (m *mapper) dns(p string, services []service) []string {
	var dns []string
	for i, s := range services {
		switch {
		case s.Type != "dns":
			m.unsupportedf("%s[%d] (type %s)", p, i, s.Type)
		case s.Address == "":
			m.malformedf("%s[%d]: a dns service without an address", p, i)
		default:
			dns = appendNew(dns, s.Address)
		}
	}
	return dns
}

// appendNew appends the items of add that list does not hold yet.
func appendNew(list []string, add ...string) []string {
	for _, s := range add {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}
