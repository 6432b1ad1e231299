// Package nodecert makes the certificates a node issues itself: a new
// ECDSA P-256 key (milliseconds under TCG, where an RSA key costs
// seconds) and a certificate for it from a template, signed by a parent
// CA or by itself.
package nodecert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
)

// Issue makes a key and a certificate from tmpl (a random serial number
// when tmpl has none), signed by parent with parentKey, or self-signed
// when parent is nil. It returns both in PEM.
func Issue(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make a key: %w", err)
	}
	t := *tmpl
	if t.SerialNumber == nil {
		if t.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
			return nil, nil, fmt.Errorf("make a serial number: %w", err)
		}
	}
	if parent == nil {
		parent, parentKey = &t, key
	}
	der, err := x509.CreateCertificate(rand.Reader, &t, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign the certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
