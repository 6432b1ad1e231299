package clustersecrets

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// decodePEM returns the one PEM block in s, which must be of one of the
// given types and may be surrounded by nothing but whitespace.
func decodePEM(s string, want string, types ...string) (*pem.Block, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("is missing: want a PEM %s block", want)
	}
	if !strings.HasPrefix(strings.TrimSpace(s), "-----BEGIN ") {
		return nil, fmt.Errorf("is not PEM: want a %s block starting with -----BEGIN", want)
	}
	block, rest := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("is not valid PEM (truncated or garbled?): want one %s block", want)
	}
	if !slices.Contains(types, block.Type) {
		return nil, fmt.Errorf("is a PEM %q block; want %s", block.Type, want)
	}
	if len(block.Headers) > 0 {
		return nil, fmt.Errorf("is a PEM block with headers (encrypted?); want a plain %s block", want)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, errors.New("has more after its PEM block; want exactly one block")
	}
	return block, nil
}

// parseCertificate parses a PEM certificate.
func parseCertificate(s string) (*x509.Certificate, error) {
	block, err := decodePEM(s, `"CERTIFICATE"`, blockCertificate)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("does not parse as an X.509 certificate: %w", err)
	}
	return cert, nil
}

// parsePrivateKey parses a PEM RSA or ECDSA private key in any of the
// encodings kubeadm reads (k8s.io/client-go/util/keyutil).
func parsePrivateKey(s string) (crypto.Signer, error) {
	block, err := decodePEM(s, privateKeyBlockDesc, blockECPrivateKey, blockRSAPrivateKey, blockPKCS8Key)
	if err != nil {
		return nil, err
	}
	var key any
	switch block.Type {
	case blockECPrivateKey:
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case blockRSAPrivateKey:
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("does not parse as a %q: %w", block.Type, err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("holds a %T; kubeadm takes RSA or ECDSA keys", key)
	}
}

// parsePublicKey parses a PEM RSA or ECDSA public key.
func parsePublicKey(s string) (crypto.PublicKey, error) {
	block, err := decodePEM(s, publicKeyBlockDesc, blockPublicKey, blockRSAPublicKey)
	if err != nil {
		return nil, err
	}
	var key any
	if block.Type == blockRSAPublicKey {
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	} else {
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("does not parse as a %q: %w", block.Type, err)
	}
	switch key.(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey:
		return key, nil
	default:
		return nil, fmt.Errorf("holds a %T; kubeadm takes RSA or ECDSA keys", key)
	}
}

// samePublicKey reports whether a and b are the same public key.
func samePublicKey(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
