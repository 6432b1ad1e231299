package kubeadmconfig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// BenchmarkMutualTLSHandshake measures what EncryptionAlgorithm is for: one
// mutual-TLS handshake as a component makes it with the API server (both
// leaves of the same algorithm, as kubeadm issues them, under an ECDSA
// P-256 CA like the cluster's), client and server together. RSA-2048 is
// kubeadm's default and the baseline.
func BenchmarkMutualTLSHandshake(b *testing.B) {
	for _, alg := range []string{"RSA-2048", EncryptionAlgorithm} {
		b.Run(alg, func(b *testing.B) {
			caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			caTmpl := &x509.Certificate{
				SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
				NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
				IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
			}
			caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
			if err != nil {
				b.Fatal(err)
			}
			ca, _ := x509.ParseCertificate(caDER)
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			leaf := func(serial int64, usage x509.ExtKeyUsage) tls.Certificate {
				var key crypto.Signer
				switch alg {
				case "RSA-2048":
					key, err = rsa.GenerateKey(rand.Reader, 2048)
				case "ECDSA-P256":
					key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				default:
					b.Fatalf("no key generator for %s", alg)
				}
				if err != nil {
					b.Fatal(err)
				}
				tmpl := &x509.Certificate{
					SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "kube-apiserver"},
					NotBefore: caTmpl.NotBefore, NotAfter: caTmpl.NotAfter,
					KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
					IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
				}
				der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
				if err != nil {
					b.Fatal(err)
				}
				return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
			}
			serverCfg := &tls.Config{
				Certificates: []tls.Certificate{leaf(2, x509.ExtKeyUsageServerAuth)},
				ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool,
			}
			clientCfg := &tls.Config{
				Certificates: []tls.Certificate{leaf(3, x509.ExtKeyUsageClientAuth)},
				RootCAs:      pool, ServerName: "127.0.0.1",
			}
			for b.Loop() {
				c, s := net.Pipe()
				server, client := tls.Server(s, serverCfg), tls.Client(c, clientCfg)
				done := make(chan error, 1)
				go func() { done <- server.Handshake() }()
				if err := client.Handshake(); err != nil {
					b.Fatalf("client handshake: %v", err)
				}
				if err := <-done; err != nil {
					b.Fatalf("server handshake: %v", err)
				}
				_ = c.Close()
				_ = s.Close()
			}
		})
	}
}
