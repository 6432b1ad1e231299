package machineconfig

import (
	"net"
	"net/netip"
	"path"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// networkChecker validates interfaces, remembering what earlier ones used so
// that clashes between interfaces are found.
type networkChecker struct {
	ps *strictyaml.Problems
	// names, macs and addrs map what is in use to where it was first used.
	names map[string]strictyaml.Path
	macs  map[string]strictyaml.Path
	addrs map[netip.Addr]strictyaml.Path
	// gateways maps true (IPv4) and false (IPv6) to the gateway setting it.
	gateways map[bool]strictyaml.Path
}

func validateNetwork(ps *strictyaml.Problems, p strictyaml.Path, n Network) {
	c := networkChecker{
		ps:       ps,
		names:    map[string]strictyaml.Path{},
		macs:     map[string]strictyaml.Path{},
		addrs:    map[netip.Addr]strictyaml.Path{},
		gateways: map[bool]strictyaml.Path{},
	}
	for i, iface := range n.Interfaces {
		c.checkInterface(p.Field("interfaces").Index(i), iface)
	}
}

func (c *networkChecker) checkInterface(p strictyaml.Path, iface Interface) {
	switch {
	case iface.Name != "" && iface.MACAddress != "":
		c.ps.Addf(p, "set only one of name and macAddress to choose the link, not both")
	case iface.Name == "" && iface.MACAddress == "":
		c.ps.Addf(p, "set name (like enp0s2 or en*) or macAddress (like 52:54:00:12:34:56) to choose the link")
	}
	if iface.Name != "" {
		c.checkName(p.Field("name"), iface.Name)
	}
	if iface.MACAddress != "" {
		c.checkMAC(p.Field("macAddress"), iface.MACAddress)
	}
	if !iface.DHCP && len(iface.Addresses) == 0 {
		c.ps.Addf(p, "dhcp is false and there are no static addresses; set dhcp: true or list addresses like 10.0.0.10/24")
	}
	prefixes := c.checkAddresses(p.Field("addresses"), iface.Addresses)
	if iface.Gateway != "" {
		c.checkGateway(p.Field("gateway"), iface.Gateway, prefixes)
	}
	checkDNS(c.ps, p.Field("dns"), iface.DNS)
}

// checkName validates a literal interface name or a path.Match glob.
func (c *networkChecker) checkName(p strictyaml.Path, name string) {
	isGlob := strings.ContainsAny(name, `*?[\`)
	switch {
	case name == "." || name == "..":
		c.ps.Addf(p, "%q is not a valid interface name", name)
	case strings.ContainsAny(name, "/: \t\n"):
		c.ps.Addf(p, "%q is not a valid interface name: it must not contain '/', ':' or spaces", name)
	case isGlob && !validGlob(name):
		c.ps.Addf(p, "%q is not a valid glob pattern; use path.Match syntax, like en* or eth[0-3]", name)
	case !isGlob && len(name) > 15:
		c.ps.Addf(p, "%q is %d characters long; Linux interface names have at most 15", name, len(name))
	default:
		if first, dup := c.names[name]; dup {
			c.ps.Addf(p, "%q is already used by %s; each interface entry needs its own name", name, first)
			return
		}
		c.names[name] = p
	}
}

func validGlob(pattern string) bool {
	_, err := path.Match(pattern, "")
	return err == nil
}

func (c *networkChecker) checkMAC(p strictyaml.Path, mac string) {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 || len(mac) != len("00:00:00:00:00:00") || mac[2] != ':' {
		c.ps.Addf(p, "%q is not a MAC address; write six hex bytes separated by colons, like 52:54:00:12:34:56", mac)
		return
	}
	key := hw.String() // lower case, so matching ignores case
	if first, dup := c.macs[key]; dup {
		c.ps.Addf(p, "%q is already used by %s; each interface entry needs its own MAC address", mac, first)
		return
	}
	c.macs[key] = p
}

// checkAddresses validates static addresses and returns the valid ones.
func (c *networkChecker) checkAddresses(p strictyaml.Path, addrs []string) []netip.Prefix {
	var valid []netip.Prefix
	for i, s := range addrs {
		ap := p.Index(i)
		prefix, msg := parseHostPrefix(s)
		if msg != "" {
			c.ps.Addf(ap, "%s", msg)
			continue
		}
		if first, dup := c.addrs[prefix.Addr()]; dup {
			c.ps.Addf(ap, "%s is already assigned by %s; each address may be used once", prefix.Addr(), first)
			continue
		}
		c.addrs[prefix.Addr()] = ap
		valid = append(valid, prefix)
	}
	return valid
}

// parseHostPrefix parses a static address in CIDR form, or says what is
// wrong with it.
func parseHostPrefix(s string) (netip.Prefix, string) {
	prefix, err := netip.ParsePrefix(s)
	if err != nil {
		if addr, err := netip.ParseAddr(s); err == nil {
			return netip.Prefix{}, quote(s) + " has no prefix length (write it like " + examplePrefix(addr) + ")"
		}
		example := "10.0.0.10/24"
		if strings.Contains(s, ":") {
			example = "fd00::10/64"
		}
		return netip.Prefix{}, quote(s) + " is not an address in CIDR form (write it like " + example + ")"
	}
	addr := prefix.Addr()
	switch {
	case addr.IsUnspecified(), addr.IsLoopback(), addr.IsMulticast():
		return netip.Prefix{}, quote(s) + " cannot be assigned to a network interface; give the node's own address, like 10.0.0.10/24"
	case addr.Is4() && prefix.Bits() <= 30 && addr == prefix.Masked().Addr():
		return netip.Prefix{}, quote(s) + " is the network address of its subnet; give the node's own address, like " +
			netip.PrefixFrom(addr.Next(), prefix.Bits()).String()
	case addr.Is4() && prefix.Bits() <= 30 && addr == lastAddr(prefix):
		return netip.Prefix{}, quote(s) + " is the broadcast address of its subnet; give the node's own address, like " +
			netip.PrefixFrom(addr.Prev(), prefix.Bits()).String()
	}
	return prefix, ""
}

// examplePrefix suggests a CIDR form for an address written without one.
func examplePrefix(addr netip.Addr) string {
	if addr.Is4() {
		return netip.PrefixFrom(addr, 24).String()
	}
	return netip.PrefixFrom(addr.WithZone(""), 64).String()
}

// lastAddr returns the highest address in prefix (the IPv4 broadcast).
func lastAddr(prefix netip.Prefix) netip.Addr {
	b := prefix.Masked().Addr().AsSlice()
	for i := prefix.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	addr, _ := netip.AddrFromSlice(b)
	return addr
}
