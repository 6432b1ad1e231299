package cloudinit

import (
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// v2 maps a version 2 (netplan style) network config.
func (d *doc) v2(entries []entry) machineconfig.Network {
	var n machineconfig.Network
	for _, e := range entries {
		switch e.key {
		case "version", "renderer":
		case "ethernets":
			for _, eth := range d.mapping(e.val, e.path) {
				if iface, ok := d.ethernet(eth); ok {
					n.Interfaces = append(n.Interfaces, iface)
				}
			}
		default:
			d.unsupportedf("%s", e.path)
		}
	}
	return n
}

// ethernet maps one entry of ethernets; its ID names the link unless it
// has a match.
func (d *doc) ethernet(eth entry) (machineconfig.Interface, bool) {
	iface := machineconfig.Interface{Name: eth.key}
	for _, e := range d.mapping(eth.val, eth.path) {
		switch e.key {
		case "match":
			d.match(e, &iface)
		case "set-name":
			d.str(e.val, e.path) // links keep their names
		case "dhcp4":
			iface.DHCP = d.boolean(e.val, e.path)
		case "dhcp6":
			if d.boolean(e.val, e.path) {
				d.unsupportedf("%s: true", e.path)
			}
		case "addresses":
			d.addresses(e, &iface)
		case "gateway4", "gateway6":
			d.setGateway(&iface, d.str(e.val, e.path), e.path)
		case "routes":
			d.routes(e, &iface)
		case "nameservers":
			for _, ns := range d.mapping(e.val, e.path) {
				if ns.key == "addresses" {
					iface.DNS = appendNew(iface.DNS, d.strs(ns.val, ns.path)...)
				} else {
					d.unsupportedf("%s", ns.path)
				}
			}
		default:
			d.unsupportedf("%s", e.path)
		}
	}
	if !iface.DHCP && len(iface.Addresses) == 0 {
		d.unsupportedf("%s (a link without dhcp4 or addresses)", eth.path)
		return iface, false
	}
	return iface, true
}

// match chooses the link by MAC address, else by name (a glob).
func (d *doc) match(e entry, iface *machineconfig.Interface) {
	var name, mac string
	for _, m := range d.mapping(e.val, e.path) {
		switch m.key {
		case "macaddress":
			mac = d.str(m.val, m.path)
		case "name":
			name = d.str(m.val, m.path)
		default:
			d.unsupportedf("%s", m.path)
		}
	}
	switch {
	case mac != "":
		iface.Name, iface.MACAddress = "", mac
	case name != "":
		iface.Name = name
	}
}

// addresses adds static addresses in CIDR form.
func (d *doc) addresses(e entry, iface *machineconfig.Interface) {
	for i, a := range d.list(e.val, e.path) {
		p := index(e.path, i)
		if a.Kind == yaml.MappingNode {
			d.unsupportedf("%s (an address with options)", p)
			continue
		}
		s := d.str(a, p)
		addr, msg := cidr(s, "")
		if msg != "" {
			d.badf(a, p, "%s", msg)
			continue
		}
		iface.Addresses = append(iface.Addresses, addr)
	}
}

// routes takes default routes as the gateway; other routes are refused.
func (d *doc) routes(e entry, iface *machineconfig.Interface) {
	for i, r := range d.list(e.val, e.path) {
		p := index(e.path, i)
		var to, via string
		for _, f := range d.mapping(r, p) {
			switch f.key {
			case "to":
				to = d.str(f.val, f.path)
			case "via":
				via = d.str(f.val, f.path)
			default:
				d.unsupportedf("%s", f.path)
			}
		}
		switch to {
		case "default", "0.0.0.0/0", "::/0":
			if via == "" {
				d.badf(r, p, "a default route needs via")
				continue
			}
			d.setGateway(iface, via, p)
		default:
			d.unsupportedf("%s (to %s)", p, to)
		}
	}
}
