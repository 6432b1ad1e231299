package qemu

import (
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ipv4Packet is the part of a captured IPv4 packet the tests look at.
type ipv4Packet struct {
	src, dst         netip.Addr
	srcPort, dstPort uint16 // UDP only
	yiaddr           netip.Addr
}

// readPcap parses the IPv4 packets of a little-endian Ethernet pcap file
// as written by QEMU's filter-dump. A truncated last record (QEMU may be
// writing it) is ignored.
func readPcap(t *testing.T, path string) []ipv4Packet {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading capture: %v", err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(b[20:]) != 1 {
		t.Fatalf("capture %s: not a little-endian Ethernet pcap (%d bytes)", path, len(b))
	}
	var pkts []ipv4Packet
	for off := 24; off+16 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[off+8:]))
		off += 16
		if off+n > len(b) {
			break
		}
		if p, ok := parseIPv4(b[off : off+n]); ok {
			pkts = append(pkts, p)
		}
		off += n
	}
	return pkts
}

func parseIPv4(frame []byte) (ipv4Packet, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return ipv4Packet{}, false
	}
	ip := frame[14:]
	p := ipv4Packet{
		src: netip.AddrFrom4([4]byte(ip[12:16])),
		dst: netip.AddrFrom4([4]byte(ip[16:20])),
	}
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] == 17 && len(ip) >= ihl+8 {
		udp := ip[ihl:]
		p.srcPort, p.dstPort = binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
		if dhcp := udp[8:]; len(dhcp) >= 20 {
			p.yiaddr = netip.AddrFrom4([4]byte(dhcp[16:20]))
		}
	}
	return p, true
}

// TestRestrictedNetworkDHCP proves that with NetRestricted the guest gets a
// DHCP lease from QEMU and that the capture sees only the test subnet. With
// no disk, OVMF PXE-boots the NIC, which does the DHCP exchange for us.
func TestRestrictedNetworkDHCP(t *testing.T) {
	requireQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	capture := filepath.Join(t.TempDir(), "net.pcap")
	start := time.Now()
	vm := startVM(ctx, t, Config{
		Dir:     t.TempDir(),
		Network: Network{Mode: NetRestricted, MAC: "52:54:00:12:34:99", Capture: capture},
	})
	var leased bool
	for !leased {
		select {
		case <-ctx.Done():
			t.Fatalf("no DHCP offer for 10.0.2.15 in %s; console tail:\n%s", capture, vm.console.tail(tailLines))
		case <-time.After(500 * time.Millisecond):
		}
		for _, p := range readPcap(t, capture) {
			if p.srcPort == 67 && p.dstPort == 68 && p.yiaddr == netip.MustParseAddr("10.0.2.15") {
				leased = true
			}
		}
	}
	t.Logf("DHCP offer captured after %v", time.Since(start).Round(time.Millisecond))
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix("10.0.2.0/24")
	inside := func(a netip.Addr) bool {
		return subnet.Contains(a) || a == netip.IPv4Unspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
	}
	pkts := readPcap(t, capture)
	for _, p := range pkts {
		if !inside(p.src) || !inside(p.dst) {
			t.Errorf("packet %v -> %v left the test subnet", p.src, p.dst)
		}
	}
	t.Logf("%d IPv4 packets captured, all within %v", len(pkts), subnet)
}
