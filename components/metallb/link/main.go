// Command metallb-link writes the MetalLB speaker's list of interfaces to
// leave alone (its excludel2.yaml) so that it answers for LoadBalancer
// addresses on one link only: the one that holds the node's address, the
// cluster's link. Upstream's list names the usual virtual links (veth,
// cni, flannel); a node's other NICs, such as a management network, would
// still answer ARP for the cluster's addresses.
//
//	metallb-link -node-ip 10.77.0.10 -o /etc/metallb/excludel2.yaml
//
// It runs as an init container of the speaker's pod (host network, the
// node's links), from the speaker's image. A node whose address is on no
// link yet is an error: the kubelet runs it again.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, hostLinks); err != nil {
		fmt.Fprintln(os.Stderr, "metallb-link:", err)
		os.Exit(1)
	}
}

// maxLinkName is the longest name Linux gives a link (IFNAMSIZ less its
// NUL).
const maxLinkName = 15

// link is a network link and the addresses on it.
type link struct {
	name  string
	addrs []netip.Prefix
}

// hostLinks lists the host's links with their addresses.
func hostLinks() ([]link, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make([]link, 0, len(ifs))
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		l := link{name: ifc.Name}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				l.addrs = append(l.addrs, p)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func run(args []string, out io.Writer, links func() ([]link, error)) error {
	f := flag.NewFlagSet("metallb-link", flag.ContinueOnError)
	f.SetOutput(io.Discard)
	nodeIP := f.String("node-ip", "", "the node's address on the cluster's link")
	file := f.String("o", "", "the speaker's excludel2.yaml to write")
	if err := f.Parse(args); err != nil {
		return fmt.Errorf("%w (usage: -node-ip IP -o FILE)", err)
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", f.Args())
	}
	ip, err := netip.ParseAddr(*nodeIP)
	if err != nil {
		return fmt.Errorf("-node-ip: %w", err)
	}
	if *file == "" {
		return errors.New("-o: no file named")
	}
	ls, err := links()
	if err != nil {
		return err
	}
	name, err := linkOf(ls, ip.Unmap())
	if err != nil {
		return err
	}
	if !utf8.ValidString(name) || len(name) > maxLinkName {
		return fmt.Errorf("the cluster's link %q: not a link name this program can express (UTF-8, at most %d bytes)", name, maxLinkName)
	}
	if err := writeFile(*file, excludeConfig(name)); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "metallb-link: the speaker answers on %s (it holds %s) and on no other link\n", name, ip)
	return nil
}

// linkOf names the link that holds ip.
func linkOf(ls []link, ip netip.Addr) (string, error) {
	var on []string
	for _, l := range ls {
		for _, a := range l.addrs {
			if a.Addr().Unmap() == ip {
				on = append(on, l.name)
				break
			}
		}
	}
	switch len(on) {
	case 0:
		return "", fmt.Errorf("no link holds the node's address %s yet", ip)
	case 1:
		return on[0], nil
	default:
		return "", fmt.Errorf("the node's address %s is on more than one link (%s): the cluster's link is ambiguous", ip, strings.Join(on, ", "))
	}
}

// excludeConfig is the speaker's excludel2.yaml: one regular expression
// that matches every link name but name.
func excludeConfig(name string) []byte {
	return []byte("# Written by metallb-link: every link but " + name + ", the cluster's.\n" +
		"announcedInterfacesToExclude: [" + yamlQuote(allBut(name)) + "]\n")
}

// allBut (name in UTF-8, at most maxLinkName bytes: the expression grows
// with the square of its length) is a regular expression (RE2, which has no look-ahead) that
// matches every string but name: one that differs from name at some
// rune, or stops short of its end, or goes on past it.
func allBut(name string) string {
	rs := []rune(name)
	alts := make([]string, 0, 2*len(rs)+1)
	for i, r := range rs {
		prefix := regexp.QuoteMeta(string(rs[:i]))
		alts = append(alts, prefix+fmt.Sprintf(`[^\x{%x}](?s:.*)`, r))
		alts = append(alts, prefix) // name cut short (the empty string, too)
	}
	alts = append(alts, regexp.QuoteMeta(name)+"(?s:.+)")
	return "^(?:" + strings.Join(alts, "|") + ")$"
}

// yamlQuote quotes s as a YAML double-quoted scalar.
func yamlQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// writeFile writes the file whole: a temporary file renamed over it.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".excludel2-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
