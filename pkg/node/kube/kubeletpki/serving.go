package kubeletpki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/nodecert"
)

// servingValidity is how long the serving pair lasts: a year, as the
// kubelet's own.
const servingValidity = 365 * 24 * time.Hour

// EnsureServing writes the kubelet's self-signed serving pair when there
// is none, for node name (its hostname), and reports whether it did. The
// kubelet writes one itself at its first start, but with two RSA-2048
// keys (client-go's GenerateSelfSignedCertKey): under TCG each costs
// about 0.3 s of a whole core, ten times that on a worker starved beside
// the init node, on the path to its Node's registration. An ECDSA P-256
// key costs milliseconds. It is the same kind of certificate the kubelet
// makes: self-signed, for the node's name. A kubelet with
// serverTLSBootstrap (every node of a cluster formed by this release)
// does not use it: it serves the certificate the cluster CA issued it,
// which the API server checks (--kubelet-certificate-authority); a node of
// a cluster formed before serves this one, which nothing checks.
func EnsureServing(h *host.Host, name string) (bool, error) {
	dir := h.Path(layout.KubeletPKIDir)
	crt, key := filepath.Join(dir, servingCert), filepath.Join(dir, servingKey)
	if exists(crt) && exists(key) {
		return false, nil
	}
	certPEM, keyPEM, err := selfSigned(name, h.Now())
	if err != nil {
		return false, fmt.Errorf("the kubelet's serving certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("the kubelet's serving certificate: %w", err)
	}
	// The key first: a cut between the two leaves a key without its
	// certificate, which the kubelet ignores (it needs both) and the next
	// call replaces.
	if err := atomicfile.WriteFile(key, keyPEM, 0o600); err != nil {
		return false, fmt.Errorf("the kubelet's serving key: %w", err)
	}
	// Root's alone like every key and certificate of the node
	// (docs/security.md); only the kubelet reads it.
	if err := atomicfile.WriteFile(crt, certPEM, 0o600); err != nil {
		return false, fmt.Errorf("the kubelet's serving certificate: %w", err)
	}
	return true, nil
}

// selfSigned makes a self-signed serving certificate and its key, in PEM,
// valid from an hour before now (a clock that a control plane's chrony
// corrects backwards a little does not make it not yet valid).
func selfSigned(name string, now time.Time) (certPEM, keyPEM []byte, err error) {
	return nodecert.Issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix())},
		DNSNames:              []string{name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(servingValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}, nil, nil)
}
