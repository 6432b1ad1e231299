package machineconfig

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// checkGateway validates a gateway against the interface's valid static
// addresses. An IPv6 gateway may also be link-local (fe80::/10), as IPv6
// routers usually are.
func (c *networkChecker) checkGateway(p strictyaml.Path, s string, prefixes []netip.Prefix) {
	gw, err := netip.ParseAddr(s)
	if err != nil || gw.Zone() != "" {
		c.ps.Addf(p, "%q is not an IP address (write it like 10.0.0.1)", s)
		return
	}
	gw = gw.Unmap()
	if msg := gatewayProblem(gw, prefixes); msg != "" {
		c.ps.Addf(p, "%s", msg)
		return
	}
	if first, dup := c.gateways[gw.Is4()]; dup {
		c.ps.Addf(p, "an %s gateway is already set by %s; only one interface may set one", family(gw), first)
		return
	}
	c.gateways[gw.Is4()] = p
}

// gatewayProblem says what is wrong with a parsed gateway, or returns "".
func gatewayProblem(gw netip.Addr, prefixes []netip.Prefix) string {
	var same []netip.Prefix
	for _, prefix := range prefixes {
		if prefix.Addr().Is4() == gw.Is4() {
			same = append(same, prefix)
		}
	}
	if len(same) == 0 {
		return fmt.Sprintf("gateway %s needs a static %s address on its subnet in addresses "+
			"(with DHCP only, leave gateway out: the DHCP server provides it)", gw, family(gw))
	}
	for _, prefix := range same {
		if prefix.Addr() == gw {
			return fmt.Sprintf("%s is this interface's own address; the gateway must be another host, like %s",
				gw, exampleGateway(prefix))
		}
	}
	if gw.Is6() && gw.IsLinkLocalUnicast() {
		return ""
	}
	for _, prefix := range same {
		if prefix.Contains(gw) {
			return ""
		}
	}
	if gw.IsUnspecified() || gw.IsLoopback() || gw.IsMulticast() {
		return fmt.Sprintf("%s cannot be a gateway; use a router on the subnet, like %s", gw, exampleGateway(same[0]))
	}
	return fmt.Sprintf("%s is not inside the subnet of any static address (%s); use a gateway inside it, like %s",
		gw, joinPrefixes(same), exampleGateway(same[0]))
}

// exampleGateway suggests the first host address of prefix's subnet, or
// the next one when that is the interface's own address.
func exampleGateway(prefix netip.Prefix) string {
	gw := prefix.Masked().Addr().Next()
	if gw == prefix.Addr() {
		gw = gw.Next()
	}
	return gw.String()
}

func joinPrefixes(prefixes []netip.Prefix) string {
	s := make([]string, len(prefixes))
	for i, p := range prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func family(addr netip.Addr) string {
	if addr.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// checkDNS validates name server addresses.
func checkDNS(ps *strictyaml.Problems, p strictyaml.Path, servers []string) {
	seen := map[netip.Addr]bool{}
	for i, s := range servers {
		addr, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			ps.Addf(p.Index(i), "%q is not an IP address (write it like 10.0.0.1 or fd00::1)", s)
		case addr.IsUnspecified() || addr.IsMulticast():
			ps.Addf(p.Index(i), "%s cannot be a name server; give the DNS server's address, like 10.0.0.1", addr)
		case seen[addr]:
			ps.Addf(p.Index(i), "%s is listed more than once; remove the duplicate", addr)
		default:
			seen[addr] = true
		}
	}
}

func quote(s string) string { return strconv.Quote(s) }
