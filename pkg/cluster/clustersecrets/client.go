package clustersecrets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"time"
)

// ClientCert is a client certificate signed by the cluster CA and its key,
// both PEM, and when it stops working.
type ClientCert struct {
	Cert, Key string
	NotAfter  time.Time
}

// SignClient makes an ECDSA P-256 key and a client certificate for it,
// signed by the cluster CA: Kubernetes reads the common name as the user
// and the organizations as its groups. It is valid until ttl from now,
// never past the CA, and from the CA's own NotBefore: the API servers'
// clocks may be behind the operator's by much more than a few minutes. A
// control plane with a flat battery steps its clock to the CA's issue
// time, the latest it knows to have passed, and is the cluster's time
// from then on, behind by as long as its config waited before the first
// boot; a certificate valid from "a little before now" would not work
// there until its clock caught up. random nil means crypto/rand.Reader.
func (s *Secrets) SignClient(user string, groups []string, now time.Time, ttl time.Duration, random io.Reader) (ClientCert, error) {
	if user == "" {
		return ClientCert{}, errors.New("sign client certificate: no user name")
	}
	if ttl <= 0 {
		return ClientCert{}, fmt.Errorf("sign client certificate for %q: lifetime %s: give a positive lifetime, like 24h", user, ttl)
	}
	if random == nil {
		random = rand.Reader
	}
	caCert, err := parseCertificate(s.CA.Cert)
	if err != nil {
		return ClientCert{}, fmt.Errorf("ca.cert: %w", err)
	}
	caKey, err := parsePrivateKey(s.CA.Key)
	if err != nil {
		return ClientCert{}, fmt.Errorf("ca.key: %w", err)
	}
	notAfter := now.Add(ttl)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	if !now.Before(notAfter) {
		return ClientCert{}, fmt.Errorf("sign client certificate for %q: the cluster CA expired at %s", user, caCert.NotAfter.Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), random)
	if err != nil {
		return ClientCert{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial(random)
	if err != nil {
		return ClientCert{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    caCert.NotBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(random, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return ClientCert{}, fmt.Errorf("sign client certificate for %q: %w", user, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return ClientCert{}, fmt.Errorf("encode key: %w", err)
	}
	return ClientCert{Cert: encodePEM(blockCertificate, der), Key: encodePEM(blockECPrivateKey, keyDER), NotAfter: notAfter}, nil
}
