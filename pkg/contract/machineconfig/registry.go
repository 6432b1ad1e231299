package machineconfig

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// DefaultRegistryPort is where a node serves its images to its peers.
const DefaultRegistryPort = 5443

// Registry configures the node's registry cache. Every node serves its
// images to its own containerd on loopback; a node with Serve also serves
// them to its peers over mutual TLS (control-plane nodes), and a node with
// Peers fetches what it lacks from them. Addresses are IPs: there is no
// DNS. A peer proves itself with a client certificate from the cluster CA:
// ClientCertificate, or on a cluster node without one its kubelet's.
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
	// ClientCertificate and ClientKey (PEM), signed by the CA, are what
	// this node shows its peers. Optional on a cluster node, which shows
	// its kubelet's client certificate once it has joined.
	ClientCertificate string `yaml:"clientCertificate,omitempty"`
	ClientKey         string `yaml:"clientKey,omitempty"`
	// SignedBundlesOnly predates key purposes: a node that trusts any key
	// now takes only side-load bundles signed by a key trusted for bundles
	// (BundleKeys), with or without it. Set, it also trusts the bare keys
	// of trustedKeys for bundles, as it did before purposes existed, and
	// requires a signature even on a node that trusts no other key.
	SignedBundlesOnly bool `yaml:"signedBundlesOnly,omitempty"`
}

// validateRegistry checks r; ownCA says the node holds the cluster CA's
// key (a control plane), so it issues its serving certificate itself when
// the config carries none.
func validateRegistry(ps *strictyaml.Problems, p strictyaml.Path, r Registry, ownCA bool, trustsKeys bool) {
	if r.SignedBundlesOnly && !trustsKeys {
		ps.Addf(p.Field("signedBundlesOnly"), "takes bundles signed by a key in trustedKeys, and the config lists none; add the signing key's public half to trustedKeys (key: ed25519:…, purposes: [bundle])")
	}
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
	switch {
	case r.ClientCertificate == "" && r.ClientKey == "":
	case r.ClientCertificate == "" || r.ClientKey == "":
		ps.Addf(p.Field("clientCertificate"), "clientCertificate and clientKey go together; give both (PEM, signed by the cluster CA) or neither")
	default:
		if msg := clientCertProblem(r.ClientCertificate, r.ClientKey, r.CA); msg != "" {
			ps.Addf(p.Field("clientCertificate"), "%s", msg)
		}
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

// clientCertProblem says what is wrong with a peer client certificate: not
// a pair with its key, not for client authentication, or not signed by
// the CA the peers check it with.
func clientCertProblem(certPEM, keyPEM, caPEM string) string {
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return fmt.Sprintf("clientCertificate and clientKey do not form a valid pair: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Sprintf("clientCertificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return "" // reported on ca
	}
	// Not checked against a clock: a node's clock may still be off here.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: cert.NotBefore}); err != nil {
		return fmt.Sprintf("clientCertificate is not a client certificate of the cluster CA in ca (%v); issue it from the cluster CA with client authentication", err)
	}
	return ""
}
