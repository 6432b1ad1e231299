package machineconfig

import (
	"crypto/tls"
	"crypto/x509"
	"net/netip"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// DefaultRegistryPort is where a node serves its images to its peers.
const DefaultRegistryPort = 5443

// Registry configures the node's registry cache. Every node serves its
// images to its own containerd on loopback; a node with Serve also serves
// them to its peers over TLS (control-plane nodes), and a node with Peers
// fetches what it lacks from them. Addresses are IPs: there is no DNS.
type Registry struct {
	// Serve listens on Listen over TLS for the other nodes.
	Serve bool `yaml:"serve,omitempty"`
	// Listen is the peer-facing address, ip:port.
	Listen string `yaml:"listen,omitempty"`
	// Peers are other nodes' registries, ip:port, tried in order after loopback.
	Peers []string `yaml:"peers,omitempty"`
	// CA (PEM) verifies the peers' certificates.
	CA string `yaml:"ca,omitempty"`
	// Certificate and Key (PEM) of this node's peer-facing listener.
	Certificate string `yaml:"certificate,omitempty"`
	Key         string `yaml:"key,omitempty"`
}

// validateRegistry checks r; ownCA says the node holds the cluster CA's
// key (a control plane), so it issues its serving certificate itself when
// the config carries none.
func validateRegistry(ps *strictyaml.Problems, p strictyaml.Path, r Registry, ownCA bool) {
	if r.Serve {
		if _, err := netip.ParseAddrPort(r.Listen); err != nil {
			ps.Addf(p.Field("listen"), "%s is not ip:port; serving to peers needs the node address, like 10.0.0.11:%d", quote(r.Listen), DefaultRegistryPort)
		}
		if r.Certificate == "" && r.Key == "" && ownCA {
			// issued at first boot from the cluster CA
		} else if r.Certificate == "" || r.Key == "" {
			ps.Addf(p.Field("certificate"), "serve: true needs a certificate and key (PEM) signed by the cluster CA")
		} else if _, err := tls.X509KeyPair([]byte(r.Certificate), []byte(r.Key)); err != nil {
			ps.Addf(p.Field("certificate"), "certificate and key do not form a valid pair: %v", err)
		}
	} else if r.Listen != "" || r.Certificate != "" || r.Key != "" {
		ps.Addf(p.Field("serve"), "listen, certificate and key are only used with serve: true")
	}
	seen := map[string]bool{}
	for i, peer := range r.Peers {
		if _, err := netip.ParseAddrPort(peer); err != nil {
			ps.Addf(p.Field("peers").Index(i), "%s is not ip:port (peers are addressed by IP, like 10.0.0.11:%d)", quote(peer), DefaultRegistryPort)
		}
		if seen[peer] {
			ps.Addf(p.Field("peers").Index(i), "%s is listed twice", quote(peer))
		}
		seen[peer] = true
	}
	if len(r.Peers) > 0 || r.Serve {
		pool := x509.NewCertPool()
		if r.CA == "" {
			ps.Addf(p.Field("ca"), "peers and serve need the cluster CA (PEM) to verify each other")
		} else if !pool.AppendCertsFromPEM([]byte(r.CA)) {
			ps.Addf(p.Field("ca"), "holds no PEM certificate")
		}
	}
}
