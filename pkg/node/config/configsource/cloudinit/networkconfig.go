package cloudinit

import (
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// networkTakes says what NetworkConfig maps, for errors.
const networkTakes = "version 1 physical links with dhcp, dhcp4 or static subnets (address, netmask, gateway, " +
	"dns_nameservers) and nameserver entries; version 2 ethernets with match (macaddress or name), set-name, dhcp4, " +
	"addresses, gateway4 or gateway6, default routes and nameservers.addresses"

// NetworkConfig maps a cloud-init network config, version 1 or 2 (netplan
// style), at the top level or under a "network" key, to the machine
// config's network.
//
// A link is chosen by its MAC address when the config gives one (v1's
// mac_address, v2's match.macaddress), else by its name (v1's name, v2's
// match.name, which may be a glob, or the ethernet's ID); renaming
// (set-name, or a v1 name with a MAC address) is not done. Each link takes
// DHCPv4 and/or static addresses, one default gateway and name servers;
// v1 nameserver entries go to the first link. v2's renderer is ignored and
// dhcp6: false accepted. Anything else (bonds, bridges, VLANs, DHCPv6 and
// router advertisements, other routes, MTUs, search domains, a link with
// neither DHCP nor an address) is an error wrapping ErrUnsupported that
// names each; values of the wrong kind are an error wrapping ErrMalformed
// with their lines.
//
// An empty document, or one that describes no link, gives a Network
// without interfaces, which MachineConfig replaces with DefaultNetwork.
func NetworkConfig(data []byte) (machineconfig.Network, error) {
	d := doc{what: "network-config"}
	root, err := parseYAML(d.what, data)
	if err != nil || root == nil {
		return machineconfig.Network{}, err
	}
	base := ""
	entries := d.mapping(root, base)
	if len(entries) == 1 && entries[0].key == "network" {
		base = "network"
		entries = d.mapping(entries[0].val, base)
	}
	var n machineconfig.Network
	if len(d.malformed) == 0 {
		vp := join(base, "version")
		switch v := get(entries, "version"); {
		case v == nil:
			d.badf(root, vp, "required; set version: 1 or version: 2")
		case d.str(v, vp) == "1":
			n = d.v1(entries)
		case d.str(v, vp) == "2":
			n = d.v2(entries)
		default:
			d.badf(v, vp, "%q is not a network config version; use 1 or 2", v.Value)
		}
	}
	if err := d.err(networkTakes, ""); err != nil {
		return machineconfig.Network{}, err
	}
	return n, nil
}

// v1 maps a version 1 network config.
func (d *doc) v1(entries []entry) machineconfig.Network {
	var n machineconfig.Network
	var dns []string
	for _, e := range entries {
		switch e.key {
		case "version":
		case "config":
			for i, item := range d.list(e.val, e.path) {
				p := index(e.path, i)
				fields := d.mapping(item, p)
				typeNode := get(fields, "type")
				if typeNode == nil {
					d.badf(item, p, "has no type")
					continue
				}
				switch typ := d.str(typeNode, join(p, "type")); typ {
				case "physical":
					if iface, ok := d.v1Physical(p, fields); ok {
						n.Interfaces = append(n.Interfaces, iface)
					}
				case "nameserver":
					dns = append(dns, d.v1Nameserver(fields)...)
				default:
					d.unsupportedf("%s (type %s)", p, typ)
				}
			}
		default:
			d.unsupportedf("%s", e.path)
		}
	}
	return WithNameServers(n, dns)
}

// v1Physical maps a physical link and its subnets.
func (d *doc) v1Physical(p string, fields []entry) (machineconfig.Interface, bool) {
	var iface machineconfig.Interface
	var name string
	var subnets []entry
	for _, e := range fields {
		switch e.key {
		case "type":
		case "name":
			name = d.str(e.val, e.path)
		case "mac_address":
			iface.MACAddress = d.str(e.val, e.path)
		case "subnets":
			for i, s := range d.list(e.val, e.path) {
				subnets = append(subnets, entry{path: index(e.path, i), val: s})
			}
		default:
			d.unsupportedf("%s", e.path)
		}
	}
	if iface.MACAddress == "" {
		iface.Name = name
	}
	if iface.Name == "" && iface.MACAddress == "" {
		d.unsupportedf("%s (a link with neither name nor mac_address)", p)
		return iface, false
	}
	if len(subnets) == 0 {
		d.unsupportedf("%s (%s, a link without subnets)", p, linkOf(iface))
		return iface, false
	}
	for _, s := range subnets {
		d.v1Subnet(s.path, s.val, &iface)
	}
	return iface, true
}

// v1Subnet adds a subnet to iface.
func (d *doc) v1Subnet(p string, node *yaml.Node, iface *machineconfig.Interface) {
	fields := d.mapping(node, p)
	typ := ""
	if t := get(fields, "type"); t != nil {
		typ = d.str(t, join(p, "type"))
	}
	var address, netmask, gateway string
	static := typ == "static" || typ == "static6"
	switch {
	case typ == "dhcp" || typ == "dhcp4":
		iface.DHCP = true
	case static:
	case typ == "":
		d.badf(node, p, "has no type")
		return
	default:
		d.unsupportedf("%s (type %s)", p, typ)
		return
	}
	for _, e := range fields {
		switch {
		case e.key == "type":
		case e.key == "dns_nameservers":
			iface.DNS = appendNew(iface.DNS, d.strs(e.val, e.path)...)
		case static && e.key == "address":
			address = d.str(e.val, e.path)
		case static && e.key == "netmask":
			netmask = d.str(e.val, e.path)
		case static && e.key == "gateway":
			gateway = d.str(e.val, e.path)
		default:
			d.unsupportedf("%s", e.path)
		}
	}
	if !static {
		return
	}
	addr, msg := cidr(address, netmask)
	if msg != "" {
		d.badf(node, p, "%s", msg)
		return
	}
	iface.Addresses = append(iface.Addresses, addr)
	if gateway != "" {
		d.setGateway(iface, gateway, join(p, "gateway"))
	}
}

// v1Nameserver returns a nameserver entry's addresses.
func (d *doc) v1Nameserver(fields []entry) []string {
	var dns []string
	for _, e := range fields {
		switch e.key {
		case "type":
		case "address":
			if e.val.Kind == yaml.ScalarNode {
				dns = append(dns, d.str(e.val, e.path))
			} else {
				dns = append(dns, d.strs(e.val, e.path)...)
			}
		default:
			d.unsupportedf("%s", e.path)
		}
	}
	return dns
}

// setGateway sets iface's default gateway, or records that it already has
// another: the machine config takes one per interface.
func (d *doc) setGateway(iface *machineconfig.Interface, gateway, path string) {
	switch iface.Gateway {
	case "":
		iface.Gateway = gateway
	case gateway:
	default:
		d.unsupportedf("%s (a second default gateway on %s)", path, linkOf(*iface))
	}
}

// linkOf names the link(s) an interface entry chooses.
func linkOf(iface machineconfig.Interface) string {
	if iface.MACAddress != "" {
		return iface.MACAddress
	}
	return iface.Name
}
