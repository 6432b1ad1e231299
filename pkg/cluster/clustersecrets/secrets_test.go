package clustersecrets

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	mathrand "math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// testNow is the time the shared secrets are made at.
var testNow = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// shared is one set of secrets made with crypto/rand, made once because
// RSA key generation is slow. Tests copy it (*s) before changing it.
var shared = sync.OnceValues(func() (*Secrets, error) {
	return Generate("terrarium-test", testNow, 24*time.Hour, rand.Reader)
})

func sharedSecrets(t *testing.T) Secrets {
	t.Helper()
	s, err := shared()
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return *s
}

// seeded returns a deterministic random source.
func seeded(seed byte) *mathrand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return mathrand.NewChaCha8(s)
}

// kubeadmTokenRE is kubeadm's bootstrap token regular expression.
var kubeadmTokenRE = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

func mustCert(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode([]byte(s))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("not one PEM CERTIFICATE block:\n%s", s)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

func mustKey(t *testing.T, s string) crypto.Signer {
	t.Helper()
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		t.Fatalf("not PEM:\n%s", s)
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		t.Fatalf("unexpected PEM block type %q", block.Type)
	}
	if err != nil {
		t.Fatalf("parse %s: %v", block.Type, err)
	}
	return key.(crypto.Signer)
}

func mustPub(t *testing.T, s string) crypto.PublicKey {
	t.Helper()
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("not a PEM PUBLIC KEY block:\n%s", s)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatalf("parse public key: %v", err)
	}
	return pub
}

func samePub(a, b crypto.PublicKey) bool {
	return a.(interface{ Equal(crypto.PublicKey) bool }).Equal(b)
}

// checkSecrets verifies s in detail with crypto/x509, independently of the
// package's own checks.
func checkSecrets(t *testing.T, s *Secrets, name string, now time.Time) {
	t.Helper()
	if s.APIVersion != "terrarium.dev/v1alpha1" || s.Kind != "ClusterSecrets" {
		t.Errorf("apiVersion/kind = %q/%q", s.APIVersion, s.Kind)
	}
	if s.ClusterName != name {
		t.Errorf("ClusterName = %q, want %q", s.ClusterName, name)
	}
	if !s.CreatedAt.Equal(now) {
		t.Errorf("CreatedAt = %v, want %v", s.CreatedAt, now)
	}
	serials := map[string]bool{}
	for _, ca := range []struct {
		name string
		cn   string
		kp   KeyPair
	}{
		{"ca", "kubernetes", s.CA},
		{"frontProxyCA", "front-proxy-ca", s.FrontProxyCA},
		{"etcdCA", "etcd-ca", s.EtcdCA},
	} {
		cert := mustCert(t, ca.kp.Cert)
		if cert.Subject.CommonName != ca.cn {
			t.Errorf("%s: CN = %q, want %q", ca.name, cert.Subject.CommonName, ca.cn)
		}
		if !cert.BasicConstraintsValid || !cert.IsCA {
			t.Errorf("%s: not a CA", ca.name)
		}
		wantUsage := x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		if cert.KeyUsage != wantUsage {
			t.Errorf("%s: key usage = %v, want %v", ca.name, cert.KeyUsage, wantUsage)
		}
		if err := cert.CheckSignatureFrom(cert); err != nil {
			t.Errorf("%s: not self-signed: %v", ca.name, err)
		}
		if !bytes.Equal(cert.RawIssuer, cert.RawSubject) {
			t.Errorf("%s: issuer %v != subject %v", ca.name, cert.Issuer, cert.Subject)
		}
		if !cert.NotBefore.Equal(now.Add(-time.Hour)) || !cert.NotAfter.Equal(now.AddDate(10, 0, 0)) {
			t.Errorf("%s: valid %v to %v, want an hour before %v for ten years", ca.name, cert.NotBefore, cert.NotAfter, now)
		}
		if cert.SerialNumber.Sign() <= 0 || cert.SerialNumber.BitLen() > 128 {
			t.Errorf("%s: serial %v is not a positive 128-bit number", ca.name, cert.SerialNumber)
		}
		serials[cert.SerialNumber.String()] = true
		pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
		if !ok || pub.Curve != elliptic.P256() {
			t.Errorf("%s: key is %T, want ECDSA P-256", ca.name, cert.PublicKey)
		}
		if key := mustKey(t, ca.kp.Key); !samePub(key.Public(), cert.PublicKey) {
			t.Errorf("%s: key does not match certificate", ca.name)
		}
	}
	if len(serials) != 3 {
		t.Errorf("CA serial numbers are not distinct: %v", serials)
	}

	saKey, ok := mustKey(t, s.ServiceAccount.Key).(*rsa.PrivateKey)
	if !ok || saKey.N.BitLen() != 2048 {
		t.Errorf("service-account key is not RSA 2048")
	} else if !samePub(saKey.Public(), mustPub(t, s.ServiceAccount.Pub)) {
		t.Errorf("sa.pub does not match sa.key")
	}

	hash, err := s.CACertHash()
	if err != nil {
		t.Fatalf("CACertHash: %v", err)
	}
	sum := sha256.Sum256(mustCert(t, s.CA.Cert).RawSubjectPublicKeyInfo)
	if want := "sha256:" + hex.EncodeToString(sum[:]); hash != want {
		t.Errorf("CACertHash = %q, want %q", hash, want)
	}

	if m := kubeadmTokenRE.FindStringSubmatch(s.Token()); m == nil {
		t.Errorf("token %q does not match kubeadm's format", s.Token())
	} else if m[1] != s.BootstrapToken.ID || m[2] != s.BootstrapToken.Secret {
		t.Errorf("token %q is not id %q . secret %q", s.Token(), s.BootstrapToken.ID, s.BootstrapToken.Secret)
	}
	if key, err := hex.DecodeString(s.CertificateKey); err != nil || len(key) != 32 || strings.ToLower(s.CertificateKey) != s.CertificateKey {
		t.Errorf("certificateKey %q is not 32 bytes in lowercase hex (%v)", s.CertificateKey, err)
	}
	if err := s.Check(now); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	// Key generation ignores the reader since Go 1.26; fix the global
	// source too, so that the whole output is reproducible.
	cryptotest.SetGlobalRandom(t, 1)
	a, err := Generate("det", testNow, time.Hour, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	checkSecrets(t, a, "det", testNow)
	if want := testNow.Add(time.Hour); !a.BootstrapToken.Expires.Equal(want) {
		t.Errorf("token expires %v, want %v", a.BootstrapToken.Expires, want)
	}

	cryptotest.SetGlobalRandom(t, 1)
	b, err := Generate("det", testNow, time.Hour, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	ea, err := encode(a)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ea, eb) {
		t.Errorf("same seeds gave different secrets:\n%s\n---\n%s", ea, eb)
	}

	cryptotest.SetGlobalRandom(t, 1)
	c, err := Generate("det", testNow, time.Hour, seeded(2))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token() == a.Token() || c.CertificateKey == a.CertificateKey || c.CA.Cert == a.CA.Cert {
		t.Errorf("a different reader seed gave the same token, certificate key or CA")
	}
}

func TestGenerateRealistic(t *testing.T) {
	s := sharedSecrets(t)
	checkSecrets(t, &s, "terrarium-test", testNow)
	// Times are stored truncated and in UTC whatever now was.
	local := time.FixedZone("somewhere", 5*3600)
	now := testNow.In(local).Add(123 * time.Millisecond)
	s2, err := Generate("x", now, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s2.CreatedAt.Location() != time.UTC || !s2.CreatedAt.Equal(testNow) {
		t.Errorf("CreatedAt = %v, want %v", s2.CreatedAt, testNow)
	}
	if s2.CA.Key == s.CA.Key || s2.Token() == s.Token() {
		t.Errorf("two generations share a key or token")
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster string
		ttl     time.Duration
		random  []byte
		want    string
	}{
		{"no cluster name", "", time.Hour, nil, "cluster name"},
		{"control character", "a\nb", time.Hour, nil, "control characters"},
		{"zero ttl", "c", 0, nil, "lifetime must be positive"},
		{"short random", "c", time.Hour, make([]byte, 10), "make serial number"},
		{"zero random", "c", time.Hour, make([]byte, 1000), "keeps returning zeros"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r = rand.Reader
			if tc.random != nil {
				r = bytes.NewReader(tc.random)
			}
			_, err := Generate(tc.cluster, testNow, tc.ttl, r)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "generate cluster secrets: ") {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// signLeaf makes a server certificate for name signed by the CA kp.
func signLeaf(t *testing.T, kp KeyPair, name string, now time.Time) (certPEM, keyPEM string) {
	t.Helper()
	ca := mustCert(t, kp.Cert)
	caKey := mustKey(t, kp.Key)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatalf("sign leaf with %s: %v", ca.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

func TestCAsSignLeaves(t *testing.T) {
	s := sharedSecrets(t)
	for name, kp := range map[string]KeyPair{"ca": s.CA, "frontProxyCA": s.FrontProxyCA, "etcdCA": s.EtcdCA} {
		leafPEM, _ := signLeaf(t, kp, "node1.example", testNow)
		roots := x509.NewCertPool()
		roots.AddCert(mustCert(t, kp.Cert))
		leaf := mustCert(t, leafPEM)
		opts := x509.VerifyOptions{Roots: roots, DNSName: "node1.example", CurrentTime: testNow.Add(time.Hour)}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("%s: leaf does not verify against its CA: %v", name, err)
		}
		// And not against another CA.
		other := x509.NewCertPool()
		if name == "ca" {
			other.AddCert(mustCert(t, s.EtcdCA.Cert))
		} else {
			other.AddCert(mustCert(t, s.CA.Cert))
		}
		opts.Roots = other
		if _, err := leaf.Verify(opts); err == nil {
			t.Errorf("%s: leaf verifies against a different CA", name)
		}
	}
}

func TestFiles(t *testing.T) {
	s := sharedSecrets(t)
	files := s.Files()
	want := []string{"ca.crt", "ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt", "etcd/ca.key", "sa.key", "sa.pub"}
	if len(files) != len(want) {
		t.Errorf("Files has %d entries, want %d: %v", len(files), len(want), keys(files))
	}
	for _, name := range want {
		if _, ok := files[name]; !ok {
			t.Errorf("Files lacks %s", name)
		}
	}
	for _, pair := range []struct{ crt, key, cn string }{
		{"ca.crt", "ca.key", "kubernetes"},
		{"front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-ca"},
		{"etcd/ca.crt", "etcd/ca.key", "etcd-ca"},
	} {
		cert := mustCert(t, string(files[pair.crt]))
		if cert.Subject.CommonName != pair.cn {
			t.Errorf("%s: CN %q, want %q", pair.crt, cert.Subject.CommonName, pair.cn)
		}
		if !samePub(mustKey(t, string(files[pair.key])).Public(), cert.PublicKey) {
			t.Errorf("%s does not match %s", pair.key, pair.crt)
		}
	}
	if !samePub(mustKey(t, string(files["sa.key"])).Public(), mustPub(t, string(files["sa.pub"]))) {
		t.Errorf("sa.pub does not match sa.key")
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRotateToken(t *testing.T) {
	s := sharedSecrets(t)
	before := s
	later := testNow.Add(48 * time.Hour)
	if err := s.CheckExpiry(later); err == nil {
		t.Fatalf("token made with a 24h TTL has not expired 48h later")
	}
	if err := s.RotateToken(later.Add(500*time.Millisecond), 72*time.Hour, seeded(9)); err != nil {
		t.Fatal(err)
	}
	if s.Token() == before.Token() {
		t.Errorf("token unchanged")
	}
	if !kubeadmTokenRE.MatchString(s.Token()) {
		t.Errorf("new token %q has the wrong format", s.Token())
	}
	if want := later.Add(72 * time.Hour); !s.BootstrapToken.Expires.Equal(want) {
		t.Errorf("new token expires %v, want %v", s.BootstrapToken.Expires, want)
	}
	if err := s.Check(later); err != nil {
		t.Errorf("Check after rotation: %v", err)
	}
	rest := s
	rest.BootstrapToken = before.BootstrapToken
	if !reflect.DeepEqual(rest, before) {
		t.Errorf("RotateToken changed more than the token")
	}

	kept := s
	if err := s.RotateToken(later, 0, nil); err == nil {
		t.Errorf("RotateToken with a zero TTL succeeded")
	}
	if err := s.RotateToken(later, time.Hour, bytes.NewReader(nil)); err == nil {
		t.Errorf("RotateToken with an empty random source succeeded")
	}
	if !reflect.DeepEqual(s, kept) {
		t.Errorf("a failed RotateToken changed the secrets")
	}
}

// problemLines returns the lines of err, which must hold strictyaml.Problems.
func problemLines(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	var ps strictyaml.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %T is not strictyaml.Problems: %v", err, err)
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != len(ps) {
		t.Errorf("error has %d lines for %d problems:\n%v", got, len(ps), err)
	}
	return strings.Split(err.Error(), "\n")
}

// wantProblems checks that err has exactly one line per entry of want, the
// i-th line containing every string of want[i].
func wantProblems(t *testing.T, err error, want ...[]string) {
	t.Helper()
	lines := problemLines(t, err)
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(lines), len(want), err)
		return
	}
	for i, parts := range want {
		for _, p := range parts {
			if !strings.Contains(lines[i], p) {
				t.Errorf("problem %d %q lacks %q", i, lines[i], p)
			}
		}
	}
}

func TestCheckReportsEverything(t *testing.T) {
	good := sharedSecrets(t)
	s := good
	s.APIVersion = "v1"
	s.Kind = "Secret"
	s.ClusterName = ""
	leafCert, leafKey := signLeaf(t, good.CA, "leaf", testNow)
	s.FrontProxyCA = KeyPair{Cert: leafCert, Key: leafKey}
	s.EtcdCA.Key = good.CA.Key
	s.ServiceAccount.Pub = good.CA.Cert
	s.BootstrapToken.ID = "ABCDEF"
	s.BootstrapToken.Secret = "short"
	s.BootstrapToken.Expires = testNow.Add(-90 * time.Minute)
	s.CertificateKey = strings.ToUpper(good.CertificateKey)
	err := s.Check(testNow)
	wantProblems(t, err,
		[]string{"$.apiVersion:", `"v1"`, `"terrarium.dev/v1alpha1"`},
		[]string{"$.kind:", `"ClusterSecrets"`},
		[]string{"$.clusterName:", "missing"},
		[]string{"$.frontProxyCA.cert:", "not a CA"},
		[]string{"$.etcdCA.key:", "does not match", "$.etcdCA.cert"},
		[]string{"$.serviceAccount.pub:", `"CERTIFICATE"`},
		[]string{"$.bootstrapToken.id:", `"ABCDEF"`},
		[]string{"$.bootstrapToken.secret:", "16 characters"},
		[]string{"$.bootstrapToken.expires:", "expired at 2026-03-14T13:39:26Z", "1h30m0s ago", "imagebuild config cluster --rotate-token"},
		[]string{"$.certificateKey:", "64 lowercase hex"},
	)
	if strings.Contains(err.Error(), "short") {
		t.Errorf("the token secret leaks into the error: %v", err)
	}
	// Validate is the same minus the expiry; CheckExpiry only the expiry.
	if err := s.Validate(); err == nil || strings.Contains(err.Error(), "expired") || len(problemLines(t, err)) != 9 {
		t.Errorf("Validate: %v", err)
	}
	wantProblems(t, s.CheckExpiry(testNow), []string{"$.bootstrapToken.expires:", "expired", "--rotate-token"})
}

func TestCheckPEMProblems(t *testing.T) {
	good := sharedSecrets(t)
	other, err := Generate("other", testNow, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := good
	s.CA.Cert = good.CA.Cert[:len(good.CA.Cert)/2]
	s.CA.Key = ""
	s.FrontProxyCA.Cert = "hello"
	s.FrontProxyCA.Key = good.FrontProxyCA.Key + good.FrontProxyCA.Key
	s.EtcdCA.Cert = strings.Replace(good.EtcdCA.Cert, "MII", "MIX", 1)
	s.ServiceAccount.Key = other.ServiceAccount.Key
	wantProblems(t, s.Validate(),
		[]string{"$.ca.cert:", "not valid PEM"},
		[]string{"$.ca.key:", "missing"},
		[]string{"$.frontProxyCA.cert:", "is not PEM"},
		[]string{"$.frontProxyCA.key:", "more after its PEM block"},
		[]string{"$.etcdCA.cert:", "does not parse as an X.509 certificate"},
		[]string{"$.serviceAccount.pub:", "not the public half of $.serviceAccount.key"},
	)

	// Keys in the other encodings kubeadm reads are fine.
	s = good
	for _, kp := range []*string{&s.CA.Key, &s.ServiceAccount.Key} {
		der, err := x509.MarshalPKCS8PrivateKey(mustKey(t, *kp))
		if err != nil {
			t.Fatal(err)
		}
		*kp = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	if err := s.Check(testNow); err != nil {
		t.Errorf("PKCS#8 keys: %v", err)
	}

	// Two CAs sharing a key are refused.
	s = good
	s.EtcdCA = good.CA
	wantProblems(t, s.Validate(), []string{"$.etcdCA.cert:", "same key as $.ca.cert"})
}

func TestCheckExpiry(t *testing.T) {
	s := sharedSecrets(t)
	if err := s.CheckExpiry(testNow.Add(23 * time.Hour)); err != nil {
		t.Errorf("fresh secrets: %v", err)
	}
	// A clock behind the build host's.
	wantProblems(t, s.CheckExpiry(testNow.Add(-2*time.Hour)),
		[]string{"$.ca.cert:", "not valid until 2026-03-14T14:09:26Z", "clock"},
		[]string{"$.frontProxyCA.cert:", "not valid until"},
		[]string{"$.etcdCA.cert:", "not valid until"},
	)
	// Eleven years on.
	wantProblems(t, s.CheckExpiry(testNow.AddDate(11, 0, 0)),
		[]string{"$.ca.cert:", "expired at 2036-03-14T15:09:26Z"},
		[]string{"$.frontProxyCA.cert:", "expired"},
		[]string{"$.etcdCA.cert:", "expired"},
		[]string{"$.bootstrapToken.expires:", "expired at 2026-03-15T15:09:26Z", "--rotate-token"},
	)
	// The token expires exactly at Expires.
	if err := s.CheckExpiry(s.BootstrapToken.Expires); err == nil {
		t.Errorf("token still valid at its expiry time")
	}
	// CheckExpiry alone still says why it cannot tell.
	s.CA.Cert = "junk"
	wantProblems(t, s.CheckExpiry(testNow), []string{"$.ca.cert:", "is not PEM"})
}
