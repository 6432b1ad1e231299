// Package mirrors renders containerd's registry host configuration
// (certs.d/<host>/hosts.toml): every upstream registry resolves to this
// node's registry on loopback, and never to the upstream host itself. The
// node's registry asks the peers for what it lacks, over mutual TLS with
// the node's own certificate, so containerd holds no credential and never
// talks to another node.
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

// Files returns hosts.toml content per path relative to the certs.d
// directory.
func Files() map[string]string {
	out := map[string]string{}
	for _, up := range Upstreams() {
		out[filepath.Join(up, "hosts.toml")] = hostsTOML(up)
	}
	return out
}

func hostsTOML(upstream string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by Terrarium firstboot for %s. Images come from this node's\n", upstream)
	b.WriteString("# registry, which asks the control-plane peers for what it lacks; never\n")
	b.WriteString("# from the upstream host: the server below (the fallback) is loopback too.\n")
	fmt.Fprintf(&b, "server = %q\n\n", "http://"+Loopback)
	fmt.Fprintf(&b, "[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+Loopback)
	return b.String()
}
