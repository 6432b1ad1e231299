//go:build e2e

package qemutests

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"
)

// l2Station is a machine of the plant network that is not a node: the
// test process itself, on the VMs' multicast Ethernet segment
// (qemu.NetMulticast), sending and receiving whole Ethernet frames as
// QEMU's socket netdev does. It speaks just enough ARP and TCP to ask who
// answers for an address and to open a connection to it: what a client on
// the plant floor does first. It answers ARP for its own address, so a
// node can send it replies.
type l2Station struct {
	conn  *net.UDPConn
	out   *ipv4.PacketConn
	group *net.UDPAddr
	mac   net.HardwareAddr
	ip    netip.Addr
}

// newL2Station joins the segment at group (QEMU's mcast=, host:port) as mac
// and ip.
func newL2Station(t *testing.T, group, mac, ip string) *l2Station {
	t.Helper()
	g, err := net.ResolveUDPAddr("udp4", group)
	require.NoError(t, err)
	lo, err := net.InterfaceByName("lo")
	require.NoError(t, err)
	conn, err := net.ListenMulticastUDP("udp4", lo, g)
	require.NoError(t, err, "join the segment %s", group)
	t.Cleanup(func() { _ = conn.Close() })
	out := ipv4.NewPacketConn(conn)
	require.NoError(t, out.SetMulticastInterface(lo))
	require.NoError(t, out.SetMulticastLoopback(true))
	hw, err := net.ParseMAC(mac)
	require.NoError(t, err)
	return &l2Station{conn: conn, out: out, group: g, mac: hw, ip: netip.MustParseAddr(ip)}
}

func (s *l2Station) send(frame []byte) error {
	_, err := s.out.WriteTo(frame, nil, s.group)
	return err
}

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func ethernet(dst, src net.HardwareAddr, etherType uint16, payload []byte) []byte {
	f := make([]byte, 0, 14+len(payload))
	f = append(f, dst...)
	f = append(f, src...)
	f = binary.BigEndian.AppendUint16(f, etherType)
	return append(f, payload...)
}

func arpPacket(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	p := []byte{0, 1, 8, 0, 6, 4}
	p = binary.BigEndian.AppendUint16(p, op)
	p = append(p, sha...)
	p = append(p, spa.AsSlice()...)
	p = append(p, tha...)
	return append(p, tpa.AsSlice()...)
}

// receive reads frames until handle says it has what it waits for, or
// the deadline passes; meanwhile it answers ARP requests for the
// station's own address.
func (s *l2Station) receive(deadline time.Time, handle func(frame []byte) bool) error {
	buf := make([]byte, 65536)
	for {
		if err := s.conn.SetReadDeadline(deadline); err != nil {
			return err
		}
		n, _, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			return err
		}
		f := buf[:n]
		if len(f) < 14 || bytes.Equal(f[6:12], s.mac) {
			continue // short, or our own frame looped back
		}
		if binary.BigEndian.Uint16(f[12:14]) == 0x0806 && len(f) >= 42 &&
			binary.BigEndian.Uint16(f[20:22]) == 1 && netip.AddrFrom4([4]byte(f[38:42])) == s.ip {
			sha := net.HardwareAddr(bytes.Clone(f[22:28]))
			spa := netip.AddrFrom4([4]byte(f[28:32]))
			if err := s.send(ethernet(sha, s.mac, 0x0806, arpPacket(2, s.mac, s.ip, sha, spa))); err != nil {
				return err
			}
			continue
		}
		if handle(f) {
			return nil
		}
	}
}

// drain drops the frames the segment sent while the station was not
// listening: an old answer is no answer to a new question.
func (s *l2Station) drain() {
	_ = s.receive(time.Now().Add(10*time.Millisecond), func([]byte) bool { return false })
}

// whoHas asks the segment who has ip and returns the MAC of the first
// answer within wait.
func (s *l2Station) whoHas(ip netip.Addr, wait time.Duration) (net.HardwareAddr, error) {
	s.drain()
	req := arpPacket(1, s.mac, s.ip, make(net.HardwareAddr, 6), ip)
	if err := s.send(ethernet(broadcastMAC, s.mac, 0x0806, req)); err != nil {
		return nil, err
	}
	var mac net.HardwareAddr
	err := s.receive(time.Now().Add(wait), func(f []byte) bool {
		if binary.BigEndian.Uint16(f[12:14]) != 0x0806 || len(f) < 42 || binary.BigEndian.Uint16(f[20:22]) != 2 {
			return false
		}
		if netip.AddrFrom4([4]byte(f[28:32])) != ip {
			return false
		}
		mac = bytes.Clone(f[22:28])
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("who has %s: %w", ip, err)
	}
	return mac, nil
}

func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TCP flags.
const (
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

func (s *l2Station) tcpSegment(dstMAC net.HardwareAddr, dst netip.Addr, sport, dport uint16, seq, ack uint32, flags byte) []byte {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	src, d := s.ip.As4(), dst.As4()
	pseudo := append(append(append([]byte{}, src[:]...), d[:]...), 0, 6, 0, 20)
	var sum uint32
	for i := 0; i < len(pseudo); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pseudo[i:]))
	}
	binary.BigEndian.PutUint16(tcp[16:], checksum(tcp, sum))
	ip := []byte{0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0}
	binary.BigEndian.PutUint16(ip[4:], uint16(rand.IntN(1<<16)))
	ip = append(append(ip, src[:]...), d[:]...)
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	return ethernet(dstMAC, s.mac, 0x0800, append(ip, tcp...))
}

// errNoAnswer: no SYN-ACK (nor RST) came back within the wait.
var errNoAnswer = errors.New("no answer")

// connect sends a TCP SYN for dst:port to the MAC that answers for dst
// and waits for the SYN-ACK, then resets the half-open connection: the
// address takes connections. A RST back is an error that says so.
func (s *l2Station) connect(ctx context.Context, via net.HardwareAddr, dst netip.Addr, port uint16, wait time.Duration) error {
	s.drain()
	sport := uint16(40000 + rand.IntN(20000))
	seq := rand.Uint32()
	if err := s.send(s.tcpSegment(via, dst, sport, port, seq, 0, tcpSYN)); err != nil {
		return err
	}
	var flags byte
	err := s.receive(time.Now().Add(wait), func(f []byte) bool {
		if ctx.Err() != nil {
			return true
		}
		if binary.BigEndian.Uint16(f[12:14]) != 0x0800 || len(f) < 54 || f[23] != 6 {
			return false
		}
		ihl := int(f[14]&0x0f) * 4
		tcp := f[14+ihl:]
		if len(tcp) < 20 || netip.AddrFrom4([4]byte(f[26:30])) != dst ||
			binary.BigEndian.Uint16(tcp[0:]) != port || binary.BigEndian.Uint16(tcp[2:]) != sport {
			return false
		}
		flags = tcp[13]
		return true
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%s:%d via %s: %w within %s", dst, port, via, errNoAnswer, wait)
		}
		return err
	case flags&(tcpSYN|tcpACK) == tcpSYN|tcpACK:
		return s.send(s.tcpSegment(via, dst, sport, port, seq+1, 0, tcpRST))
	default:
		return fmt.Errorf("%s:%d via %s: answered with flags %#x, not a SYN-ACK", dst, port, via, flags)
	}
}
