package registryphase

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/nodecert"
)

// issuesRegistryCert: a control plane that serves its images and got no
// certificate in its config issues one from the cluster CA it holds.
func issuesRegistryCert(c *machineconfig.Config) bool {
	r := c.Registry
	return r != nil && r.Serve && r.Certificate == "" && c.Cluster != nil && c.Cluster.PKI != nil
}

// ensureRegistryCert keeps a serving certificate for the registry's listen
// IP, signed by the cluster CA, at certFile/keyFile; an existing one that
// still fits is kept. It reports whether it wrote.
func ensureRegistryCert(h *host.Host, c *machineconfig.Config, certFile, keyFile string) (bool, error) {
	ca, err := tls.X509KeyPair([]byte(c.Cluster.CACert), []byte(c.Cluster.PKI.CAKey))
	if err != nil {
		return false, fmt.Errorf("cluster CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return false, err
	}
	ap, err := netip.ParseAddrPort(c.Registry.Listen)
	if err != nil {
		return false, err
	}
	if registryCertFits(h, certFile, keyFile, caCert, ap.Addr()) == nil {
		return false, nil
	}
	caKey, ok := ca.PrivateKey.(crypto.Signer)
	if !ok {
		return false, fmt.Errorf("cluster CA: its key (%T) cannot sign", ca.PrivateKey)
	}
	now := h.Now()
	certPEM, keyPEM, err := nodecert.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "terrarium-registry " + c.Hostname},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    caCert.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{ap.Addr().AsSlice()},
	}, caCert, caKey)
	if err != nil {
		return false, fmt.Errorf("issue registry certificate: %w", err)
	}
	if _, err := h.WriteIfChanged(keyFile, keyPEM, 0o600); err != nil {
		return false, err
	}
	if _, err := h.WriteIfChanged(certFile, certPEM, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// registryCertFits checks an issued certificate: it pairs with its key,
// chains to the cluster CA, names ip and has not expired.
func registryCertFits(h *host.Host, certFile, keyFile string, ca *x509.Certificate, ip netip.Addr) error {
	certPEM, err := os.ReadFile(h.Path(certFile))
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(h.Path(keyFile))
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return err
	}
	return cert.VerifyHostname(ip.String())
}

// x509CA parses the cluster CA certificate.
func x509CA(c *machineconfig.Config) (*x509.Certificate, error) {
	b, _ := pem.Decode([]byte(c.Cluster.CACert))
	if b == nil {
		return nil, fmt.Errorf("cluster CA: no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}
