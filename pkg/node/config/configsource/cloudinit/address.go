package cloudinit

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// AddressCIDR writes an address with its netmask in CIDR form, as the
// machine config takes it: ("10.0.0.5", "255.255.255.0") and
// ("10.0.0.5/24", "") give "10.0.0.5/24"; the netmask may also be a prefix
// length ("24", "64") or an IPv6 mask ("ffff:ffff:ffff:ffff::").
func AddressCIDR(address, netmask string) (string, error) {
	s, msg := cidr(address, netmask)
	if msg != "" {
		return "", fmt.Errorf("%w address: %s", ErrMalformed, msg)
	}
	return s, nil
}

// cidr is AddressCIDR, saying what is wrong as a message.
func cidr(address, netmask string) (string, string) {
	address, netmask = strings.TrimSpace(address), strings.TrimSpace(netmask)
	if strings.Contains(address, "/") {
		p, err := netip.ParsePrefix(address)
		if err != nil {
			return "", fmt.Sprintf("%q is not an address in CIDR form (like 10.0.0.5/24)", address)
		}
		if bits, ok := maskBits(netmask, p.Addr().Is4()); netmask != "" && (!ok || bits != p.Bits()) {
			return "", fmt.Sprintf("netmask %q does not agree with address %q", netmask, address)
		}
		return p.String(), ""
	}
	addr, err := netip.ParseAddr(address)
	if err != nil || addr.Zone() != "" {
		return "", fmt.Sprintf("%q is not an IP address", address)
	}
	if netmask == "" {
		return "", fmt.Sprintf("address %q has no netmask; add one or write the address like %s/24", address, address)
	}
	bits, ok := maskBits(netmask, addr.Is4())
	if !ok {
		return "", fmt.Sprintf("%q is not a netmask for %s (like 255.255.255.0 or 24)", netmask, address)
	}
	return netip.PrefixFrom(addr, bits).String(), ""
}

// maskBits returns the prefix length a netmask stands for: a number, or
// an address of the same family whose set bits are contiguous.
func maskBits(mask string, is4 bool) (int, bool) {
	width := 128
	if is4 {
		width = 32
	}
	if n, err := strconv.Atoi(mask); err == nil {
		return n, n >= 0 && n <= width
	}
	m, err := netip.ParseAddr(mask)
	if err != nil || m.Is4() != is4 || m.Zone() != "" {
		return 0, false
	}
	bits, zero := 0, false
	for _, b := range m.AsSlice() {
		for i := 7; i >= 0; i-- {
			switch set := b&(1<<i) != 0; {
			case set && zero:
				return 0, false // a one after a zero
			case set:
				bits++
			default:
				zero = true
			}
		}
	}
	return bits, true
}

// WithNameServers adds name servers that belong to no particular link
// (v1's nameserver entries, OpenStack's top-level dns services) to the
// first interface, or to DefaultNetwork's when there is none.
func WithNameServers(n machineconfig.Network, servers []string) machineconfig.Network {
	if len(servers) == 0 {
		return n
	}
	ifaces := slices.Clone(n.Interfaces)
	if len(ifaces) == 0 {
		ifaces = DefaultNetwork().Interfaces
	}
	ifaces[0].DNS = appendNew(slices.Clone(ifaces[0].DNS), servers...)
	return machineconfig.Network{Interfaces: ifaces}
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
