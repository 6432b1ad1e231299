// Package mirrors renders containerd's registry host configuration
// (certs.d/<host>/hosts.toml): every upstream registry resolves to this
// node's registry cache on loopback first, then the control-plane peers,
// and never to the upstream host itself.
package mirrors

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Loopback is the address of the node's own registry.
const Loopback = "127.0.0.1:5000"

// Upstreams are the registries that get a hosts.toml; "_default" covers
// every other host.
func Upstreams() []string {
	return []string{"registry.k8s.io", "docker.io", "quay.io", "ghcr.io", "_default"}
}

// Peer is another node's registry.
type Peer struct {
	Addr   string // ip:port
	CAFile string // PEM file verifying its certificate
}

// Files returns hosts.toml content per path relative to the certs.d
// directory.
func Files(peers []Peer) map[string]string {
	out := map[string]string{}
	for _, up := range Upstreams() {
		out[filepath.Join(up, "hosts.toml")] = hostsTOML(up, peers)
	}
	return out
}

func hostsTOML(upstream string, peers []Peer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by Terrarium firstboot for %s. Images come from this node's\n", upstream)
	b.WriteString("# registry cache, then the control-plane peers; never from the upstream host:\n")
	b.WriteString("# the server below (the fallback after the hosts) is loopback too.\n")
	fmt.Fprintf(&b, "server = %q\n\n", "http://"+Loopback)
	fmt.Fprintf(&b, "[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+Loopback)
	for _, p := range peers {
		fmt.Fprintf(&b, "\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n", "https://"+p.Addr, p.CAFile)
	}
	return b.String()
}
