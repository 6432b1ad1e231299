package nodecert

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func leaf(t *testing.T, certPEM, keyPEM []byte) (*x509.Certificate, tls.Certificate) {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err, "the certificate and key make a pair")
	c, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	return c, pair
}

func TestIssue(t *testing.T) {
	now := time.Now()
	caPEM, caKeyPEM, err := Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "ca"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	require.NoError(t, err)
	ca, caPair := leaf(t, caPEM, caKeyPEM)
	assert.NoError(t, ca.CheckSignatureFrom(ca), "nil parent: self-signed")
	assert.IsType(t, &ecdsa.PrivateKey{}, caPair.PrivateKey)
	require.NotNil(t, ca.SerialNumber)
	assert.Positive(t, ca.SerialNumber.Sign(), "a serial number is drawn")

	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "node"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	certPEM, keyPEM, err := Issue(tmpl, ca, caPair.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	c, _ := leaf(t, certPEM, keyPEM)
	assert.NoError(t, c.CheckSignatureFrom(ca), "signed by the parent")
	assert.Equal(t, "node", c.Subject.CommonName)
	assert.Nil(t, tmpl.SerialNumber, "the caller's template is left as it was")
}
