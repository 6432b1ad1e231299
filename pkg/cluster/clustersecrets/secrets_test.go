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
	"math/big"
	mathrand "math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, err, "Generate")
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
	require.NotNil(t, block, "not one PEM CERTIFICATE block:\n%s", s)
	require.Equal(t, "CERTIFICATE", block.Type, "not one PEM CERTIFICATE block:\n%s", s)
	require.Empty(t, bytes.TrimSpace(rest), "not one PEM CERTIFICATE block:\n%s", s)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err, "parse certificate")
	return cert
}

func mustKey(t *testing.T, s string) crypto.Signer {
	t.Helper()
	block, _ := pem.Decode([]byte(s))
	require.NotNil(t, block, "not PEM:\n%s", s)
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
		require.Failf(t, "unexpected PEM block type", "%q", block.Type)
	}
	require.NoError(t, err, "parse %s", block.Type)
	return key.(crypto.Signer)
}

func mustPub(t *testing.T, s string) crypto.PublicKey {
	t.Helper()
	block, _ := pem.Decode([]byte(s))
	require.NotNil(t, block, "not a PEM PUBLIC KEY block:\n%s", s)
	require.Equal(t, "PUBLIC KEY", block.Type, "not a PEM PUBLIC KEY block:\n%s", s)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	require.NoError(t, err, "parse public key")
	return pub
}

func samePub(a, b crypto.PublicKey) bool {
	return a.(interface{ Equal(crypto.PublicKey) bool }).Equal(b)
}

// checkSecrets verifies s in detail with crypto/x509, independently of the
// package's own checks.
func checkSecrets(t *testing.T, s *Secrets, name string, now time.Time) {
	t.Helper()
	assert.Equal(t, "terrarium.dev/v1alpha1", s.APIVersion, "apiVersion")
	assert.Equal(t, "ClusterSecrets", s.Kind, "kind")
	assert.Equal(t, name, s.ClusterName, "ClusterName")
	assert.True(t, s.CreatedAt.Equal(now), "CreatedAt = %v, want %v", s.CreatedAt, now)
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
		assert.Equal(t, ca.cn, cert.Subject.CommonName, "%s: CN", ca.name)
		assert.True(t, cert.BasicConstraintsValid, "%s: not a CA", ca.name)
		assert.True(t, cert.IsCA, "%s: not a CA", ca.name)
		wantUsage := x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		assert.Equal(t, wantUsage, cert.KeyUsage, "%s: key usage", ca.name)
		assert.NoError(t, cert.CheckSignatureFrom(cert), "%s: not self-signed", ca.name)
		assert.Equal(t, cert.RawSubject, cert.RawIssuer, "%s: issuer %v != subject %v", ca.name, cert.Issuer, cert.Subject)
		assert.True(t, cert.NotBefore.Equal(now.Add(-time.Hour)), "%s: valid from %v, want an hour before %v", ca.name, cert.NotBefore, now)
		assert.True(t, cert.NotAfter.Equal(now.AddDate(10, 0, 0)), "%s: valid to %v, want ten years from %v", ca.name, cert.NotAfter, now)
		assert.Positive(t, cert.SerialNumber.Sign(), "%s: serial %v is not a positive 128-bit number", ca.name, cert.SerialNumber)
		assert.LessOrEqual(t, cert.SerialNumber.BitLen(), 128, "%s: serial %v is not a positive 128-bit number", ca.name, cert.SerialNumber)
		serials[cert.SerialNumber.String()] = true
		pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
		if assert.True(t, ok, "%s: key is %T, want ECDSA P-256", ca.name, cert.PublicKey) {
			assert.Equal(t, elliptic.P256(), pub.Curve, "%s: key is not ECDSA P-256", ca.name)
		}
		key := mustKey(t, ca.kp.Key)
		assert.True(t, samePub(key.Public(), cert.PublicKey), "%s: key does not match certificate", ca.name)
	}
	assert.Len(t, serials, 3, "CA serial numbers are not distinct")

	saKey, ok := mustKey(t, s.ServiceAccount.Key).(*rsa.PrivateKey)
	if assert.True(t, ok, "service-account key is not RSA 2048") &&
		assert.Equal(t, 2048, saKey.N.BitLen(), "service-account key is not RSA 2048") {
		assert.True(t, samePub(saKey.Public(), mustPub(t, s.ServiceAccount.Pub)), "sa.pub does not match sa.key")
	}

	hash, err := s.CACertHash()
	require.NoError(t, err, "CACertHash")
	sum := sha256.Sum256(mustCert(t, s.CA.Cert).RawSubjectPublicKeyInfo)
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), hash, "CACertHash")

	m := kubeadmTokenRE.FindStringSubmatch(s.Token())
	if assert.NotNil(t, m, "token %q does not match kubeadm's format", s.Token()) {
		assert.Equal(t, s.BootstrapToken.ID, m[1], "token %q is not id . secret", s.Token())
		assert.Equal(t, s.BootstrapToken.Secret, m[2], "token %q is not id . secret", s.Token())
	}
	key, err := hex.DecodeString(s.CertificateKey)
	assert.NoError(t, err, "certificateKey %q is not hex", s.CertificateKey)
	assert.Len(t, key, 32, "certificateKey %q is not 32 bytes", s.CertificateKey)
	assert.Equal(t, strings.ToLower(s.CertificateKey), s.CertificateKey, "certificateKey is not lowercase")
	assert.NoError(t, s.Check(now), "Check")
}

func TestGenerateDeterministic(t *testing.T) {
	// Key generation ignores the reader since Go 1.26; fix the global
	// source too, so that the whole output is reproducible.
	cryptotest.SetGlobalRandom(t, 1)
	a, err := Generate("det", testNow, time.Hour, seeded(1))
	require.NoError(t, err)
	checkSecrets(t, a, "det", testNow)
	want := testNow.Add(time.Hour)
	assert.True(t, a.BootstrapToken.Expires.Equal(want), "token expires %v, want %v", a.BootstrapToken.Expires, want)

	cryptotest.SetGlobalRandom(t, 1)
	b, err := Generate("det", testNow, time.Hour, seeded(1))
	require.NoError(t, err)
	ea, err := encode(a)
	require.NoError(t, err)
	eb, err := encode(b)
	require.NoError(t, err)
	assert.Equal(t, string(ea), string(eb), "same seeds gave different secrets")

	cryptotest.SetGlobalRandom(t, 1)
	c, err := Generate("det", testNow, time.Hour, seeded(2))
	require.NoError(t, err)
	assert.NotEqual(t, a.Token(), c.Token(), "a different reader seed gave the same token")
	assert.NotEqual(t, a.CertificateKey, c.CertificateKey, "a different reader seed gave the same certificate key")
	assert.NotEqual(t, a.CA.Cert, c.CA.Cert, "a different reader seed gave the same CA")
}

func TestGenerateRealistic(t *testing.T) {
	s := sharedSecrets(t)
	checkSecrets(t, &s, "terrarium-test", testNow)
	// Times are stored truncated and in UTC whatever now was.
	local := time.FixedZone("somewhere", 5*3600)
	now := testNow.In(local).Add(123 * time.Millisecond)
	s2, err := Generate("x", now, time.Hour, nil)
	require.NoError(t, err)
	assert.Same(t, time.UTC, s2.CreatedAt.Location(), "CreatedAt = %v, want it in UTC", s2.CreatedAt)
	assert.True(t, s2.CreatedAt.Equal(testNow), "CreatedAt = %v, want %v", s2.CreatedAt, testNow)
	assert.NotEqual(t, s.CA.Key, s2.CA.Key, "two generations share a key")
	assert.NotEqual(t, s.Token(), s2.Token(), "two generations share a token")
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
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "generate cluster secrets: "), "err = %v", err)
		})
	}
}

// signLeaf makes a server certificate for name signed by the CA kp.
func signLeaf(t *testing.T, kp KeyPair, name string, now time.Time) (certPEM, keyPEM string) {
	t.Helper()
	ca := mustCert(t, kp.Cert)
	caKey := mustKey(t, kp.Key)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
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
	require.NoError(t, err, "sign leaf with %s", ca.Subject.CommonName)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
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
		_, err := leaf.Verify(opts)
		assert.NoError(t, err, "%s: leaf does not verify against its CA", name)
		// And not against another CA.
		other := x509.NewCertPool()
		if name == "ca" {
			other.AddCert(mustCert(t, s.EtcdCA.Cert))
		} else {
			other.AddCert(mustCert(t, s.CA.Cert))
		}
		opts.Roots = other
		_, err = leaf.Verify(opts)
		assert.Error(t, err, "%s: leaf verifies against a different CA", name)
	}
}

func TestFiles(t *testing.T) {
	s := sharedSecrets(t)
	files := s.Files()
	want := []string{"ca.crt", "ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt", "etcd/ca.key", "sa.key", "sa.pub"}
	assert.Len(t, files, len(want), "Files has entries %v", keys(files))
	for _, name := range want {
		assert.Contains(t, files, name, "Files lacks %s", name)
	}
	for _, pair := range []struct{ crt, key, cn string }{
		{"ca.crt", "ca.key", "kubernetes"},
		{"front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-ca"},
		{"etcd/ca.crt", "etcd/ca.key", "etcd-ca"},
	} {
		cert := mustCert(t, string(files[pair.crt]))
		assert.Equal(t, pair.cn, cert.Subject.CommonName, "%s: CN", pair.crt)
		assert.True(t, samePub(mustKey(t, string(files[pair.key])).Public(), cert.PublicKey), "%s does not match %s", pair.key, pair.crt)
	}
	assert.True(t, samePub(mustKey(t, string(files["sa.key"])).Public(), mustPub(t, string(files["sa.pub"]))), "sa.pub does not match sa.key")
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
	require.Error(t, s.CheckExpiry(later), "token made with a 24h TTL has not expired 48h later")
	require.NoError(t, s.RotateToken(later.Add(500*time.Millisecond), 72*time.Hour, seeded(9)))
	assert.NotEqual(t, before.Token(), s.Token(), "token unchanged")
	assert.Regexp(t, kubeadmTokenRE, s.Token(), "new token has the wrong format")
	want := later.Add(72 * time.Hour)
	assert.True(t, s.BootstrapToken.Expires.Equal(want), "new token expires %v, want %v", s.BootstrapToken.Expires, want)
	assert.NoError(t, s.Check(later), "Check after rotation")
	rest := s
	rest.BootstrapToken = before.BootstrapToken
	assert.Equal(t, before, rest, "RotateToken changed more than the token")

	kept := s
	assert.Error(t, s.RotateToken(later, 0, nil), "RotateToken with a zero TTL succeeded")
	assert.Error(t, s.RotateToken(later, time.Hour, bytes.NewReader(nil)), "RotateToken with an empty random source succeeded")
	assert.Equal(t, kept, s, "a failed RotateToken changed the secrets")
}

// problemLines returns the lines of err, which must hold strictyaml.Problems.
func problemLines(t *testing.T, err error) []string {
	t.Helper()
	require.Error(t, err, "no error")
	var ps strictyaml.Problems
	require.ErrorAs(t, err, &ps, "error %T is not strictyaml.Problems", err)
	assert.Equal(t, len(ps), strings.Count(err.Error(), "\n")+1, "error lines for %d problems:\n%v", len(ps), err)
	return strings.Split(err.Error(), "\n")
}

// wantProblems checks that err has exactly one line per entry of want, the
// i-th line containing every string of want[i].
func wantProblems(t *testing.T, err error, want ...[]string) {
	t.Helper()
	lines := problemLines(t, err)
	if !assert.Len(t, lines, len(want), "problems:\n%v", err) {
		return
	}
	for i, parts := range want {
		for _, p := range parts {
			assert.Contains(t, lines[i], p, "problem %d lacks %q", i, p)
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
	assert.NotContains(t, err.Error(), "short", "the token secret leaks into the error")
	// Validate is the same minus the expiry; CheckExpiry only the expiry.
	err = s.Validate()
	require.Error(t, err, "Validate")
	assert.NotContains(t, err.Error(), "expired", "Validate")
	assert.Len(t, problemLines(t, err), 9, "Validate: %v", err)
	wantProblems(t, s.CheckExpiry(testNow), []string{"$.bootstrapToken.expires:", "expired", "--rotate-token"})
}

func TestCheckPEMProblems(t *testing.T) {
	good := sharedSecrets(t)
	other, err := Generate("other", testNow, time.Hour, nil)
	require.NoError(t, err)
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
		require.NoError(t, err)
		*kp = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	}
	assert.NoError(t, s.Check(testNow), "PKCS#8 keys")

	// Two CAs sharing a key are refused.
	s = good
	s.EtcdCA = good.CA
	wantProblems(t, s.Validate(), []string{"$.etcdCA.cert:", "same key as $.ca.cert"})
}

func TestCheckExpiry(t *testing.T) {
	s := sharedSecrets(t)
	assert.NoError(t, s.CheckExpiry(testNow.Add(23*time.Hour)), "fresh secrets")
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
	assert.Error(t, s.CheckExpiry(s.BootstrapToken.Expires), "token still valid at its expiry time")
	// CheckExpiry alone still says why it cannot tell.
	s.CA.Cert = "junk"
	wantProblems(t, s.CheckExpiry(testNow), []string{"$.ca.cert:", "is not PEM"})
}
