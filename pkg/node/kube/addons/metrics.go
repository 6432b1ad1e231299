package addons

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/nodecert"
)

// DefaultMetricsServerImage is used when the bundle names none.
const DefaultMetricsServerImage = "registry.k8s.io/metrics-server/metrics-server:v0.8.0"

//go:embed metrics-server.yaml.tmpl
var metricsServerTemplate string

// MetricsServerInput are the settings of metrics-server's manifest.
type MetricsServerInput struct {
	Image string
	// CA and CAKey are the cluster CA, which issues metrics-server's
	// serving certificate and which the API server checks it against.
	CA    *x509.Certificate
	CAKey crypto.Signer
	// DNSDomain is the cluster's DNS domain (cluster.local).
	DNSDomain string
	// Now is when the certificate starts to be valid (an hour before, for
	// clocks a little behind).
	Now time.Time
}

// MetricsServerServiceNames are the names metrics-server's serving
// certificate is issued for: its Service's, as the API server's
// aggregator dials it.
func MetricsServerServiceNames(dnsDomain string) []string {
	return []string{"metrics-server.kube-system.svc", "metrics-server.kube-system.svc." + dnsDomain}
}

// MetricsServer renders the manifest of metrics-server, the resource
// metrics API: its rights, a serving pair issued from the cluster CA (in a
// Secret), its Service and Deployment in kube-system and the APIService
// that names the CA. The manifest holds a private key: apply it, never
// write it to disk.
func MetricsServer(in MetricsServerInput) ([]byte, error) {
	in, err := in.withDefaults()
	if err != nil {
		return nil, err
	}
	names := MetricsServerServiceNames(in.DNSDomain)
	certPEM, keyPEM, err := nodecert.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: names[0]},
		DNSNames:    names,
		NotBefore:   in.Now.Add(-time.Hour),
		NotAfter:    in.CA.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, in.CA, in.CAKey)
	if err != nil {
		return nil, fmt.Errorf("metrics-server: its serving certificate: %w", err)
	}
	b64 := base64.StdEncoding.EncodeToString
	return renderMetricsServer(in, b64(certPEM), b64(keyPEM))
}

// MetricsServerWithoutPair renders metrics-server's manifest as
// MetricsServer does with its serving pair left empty: what decides the
// add-on apart from the pair issued each time it is applied.
func MetricsServerWithoutPair(in MetricsServerInput) ([]byte, error) {
	in, err := in.withDefaults()
	if err != nil {
		return nil, err
	}
	return renderMetricsServer(in, `""`, `""`)
}

func (in MetricsServerInput) withDefaults() (MetricsServerInput, error) {
	if in.Image == "" {
		in.Image = DefaultMetricsServerImage
	}
	if in.CA == nil || in.CAKey == nil {
		return in, errors.New("metrics-server: the cluster CA is required to issue its serving certificate")
	}
	if in.DNSDomain == "" {
		return in, errors.New("metrics-server: the cluster's DNS domain is required")
	}
	return in, nil
}

func renderMetricsServer(in MetricsServerInput, certBase64, keyBase64 string) ([]byte, error) {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: in.CA.Raw})
	return renderManifest("metrics-server", metricsServerTemplate, struct{ Image, CertBase64, KeyBase64, CABase64 string }{
		in.Image, certBase64, keyBase64, base64.StdEncoding.EncodeToString(caPEM),
	})
}
