package clustersecrets

import (
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
	"fmt"
	"io"
	"math/big"
	"time"
)

const (
	// APIVersion is the apiVersion of a cluster secrets document.
	APIVersion = "terrarium.dev/v1alpha1"
	// Kind is the kind of a cluster secrets document.
	Kind = "ClusterSecrets"

	// CACommonName is the common name of the cluster CA, as kubeadm makes it.
	CACommonName = "kubernetes"
	// FrontProxyCACommonName is the common name of the front-proxy CA, as
	// kubeadm makes it.
	FrontProxyCACommonName = "front-proxy-ca"
	// EtcdCACommonName is the common name of the etcd CA, as kubeadm makes it.
	EtcdCACommonName = "etcd-ca"

	// RotateTokenCommand is the command that replaces an expired bootstrap
	// token; problems about the token's expiry point to it.
	RotateTokenCommand = "imagebuild config cluster --rotate-token"

	// caBackdate is how long before "now" a CA becomes valid, so that nodes
	// whose clocks lag the build host's a little still accept it.
	caBackdate = time.Hour
	// caYears is how long a CA is valid for.
	caYears = 10
	// serviceAccountKeyBits is the size of the service-account RSA key.
	serviceAccountKeyBits = 2048
	// serialBits is the size of a CA certificate's random serial number.
	serialBits = 128
	// certificateKeyBytes is the size of kubeadm's certificate key (AES-256).
	certificateKeyBytes = 32

	// tokenChars is the alphabet of bootstrap token IDs and secrets.
	tokenChars = "0123456789abcdefghijklmnopqrstuvwxyz"
	// tokenIDLen and tokenSecretLen are the lengths of a bootstrap token's
	// ID and secret.
	tokenIDLen     = 6
	tokenSecretLen = 16
)

// Secrets is everything a Terrarium cluster is formed with that must be
// made before its nodes boot: the CAs kubeadm would otherwise create on the
// first control-plane node, the service-account signing key, the bootstrap
// token nodes join with, and the key control-plane certificates are shared
// under when control-plane nodes join.
//
// A Secrets is a plain value: copying it copies everything
// (RetiredSecretsEncryptionKeys is replaced, never changed in place).
type Secrets struct {
	// APIVersion is APIVersion.
	APIVersion string `yaml:"apiVersion"`
	// Kind is Kind.
	Kind string `yaml:"kind"`
	// ClusterName is the name of the cluster (kubeadm's clusterName).
	ClusterName string `yaml:"clusterName"`
	// CreatedAt is when the secrets were made.
	CreatedAt time.Time `yaml:"createdAt"`
	// CA is the cluster CA: kubeadm's ca.crt and ca.key, CN "kubernetes".
	CA KeyPair `yaml:"ca"`
	// FrontProxyCA is the front-proxy CA: front-proxy-ca.crt and
	// front-proxy-ca.key, CN "front-proxy-ca".
	FrontProxyCA KeyPair `yaml:"frontProxyCA"`
	// EtcdCA is etcd's CA: etcd/ca.crt and etcd/ca.key, CN "etcd-ca".
	EtcdCA KeyPair `yaml:"etcdCA"`
	// ServiceAccount is the key service-account tokens are signed with:
	// sa.key and sa.pub.
	ServiceAccount ServiceAccountKey `yaml:"serviceAccount"`
	// BootstrapToken is the token nodes join the cluster with.
	BootstrapToken BootstrapToken `yaml:"bootstrapToken"`
	// CertificateKey is kubeadm's --certificate-key: 64 lowercase hex
	// digits (32 bytes), the AES key the control-plane certificates are
	// shared under when a control-plane node joins.
	CertificateKey string `yaml:"certificateKey"`
	// SigningKey is the cluster's config signing key: an ed25519 key as one
	// PEM "PRIVATE KEY" block (PKCS#8). Every node config lists its public
	// half in trustedKeys and comes with a signature by it, so that a node,
	// once enrolled, accepts a changed config signed with it (see package
	// signature). Files written before the key existed lack it: Load
	// accepts them, and EnsureSigningKey adds one.
	SigningKey string `yaml:"signingKey,omitempty"`
	// SecretsEncryptionKey is the key the control planes encrypt the
	// cluster's Secrets with in etcd: 32 random bytes, standard base64
	// (see machineconfig.Cluster.SecretsEncryptionKey). Files written
	// before the key existed lack it: Load accepts them, and
	// EnsureSecretsEncryptionKey adds one.
	SecretsEncryptionKey string `yaml:"secretsEncryptionKey,omitempty"`
	// RetiredSecretsEncryptionKeys are the keys SecretsEncryptionKey
	// replaced, newest first (RotateSecretsEncryptionKey). They are kept
	// for good: a backup taken before a rotation holds Secrets encrypted
	// with one of them, and its restore needs it.
	RetiredSecretsEncryptionKeys []string `yaml:"retiredSecretsEncryptionKeys,omitempty"`
	// RecoveryKey is the escrow key of the nodes' TERRA-STATE recovery
	// keys: an X25519 key as one PEM "PRIVATE KEY" block (PKCS#8). Every
	// node config carries its public half (state.recoveryKey); a node
	// derives its recovery key against it and keeps only a recovery code,
	// from which `imagebuild config recovery-key` gives the key back
	// (package recoverykey). Files written before the key existed lack
	// it: Load accepts them, and EnsureRecoveryKey adds one.
	RecoveryKey string `yaml:"recoveryKey,omitempty"`
	// ConfigGeneration is the generation of the node configs made from
	// these secrets (absent: 1). A rotation raises it, so that the
	// configs it makes are signed changes the nodes accept.
	ConfigGeneration uint64 `yaml:"configGeneration,omitempty"`
}

// KeyPair is a certificate and its private key, both PEM. The certificate is
// one "CERTIFICATE" block; the key is one "EC PRIVATE KEY" (SEC1),
// "RSA PRIVATE KEY" (PKCS#1) or "PRIVATE KEY" (PKCS#8) block holding an
// ECDSA or RSA key, as kubeadm reads them.
type KeyPair struct {
	// Cert is the PEM certificate.
	Cert string `yaml:"cert"`
	// Key is the PEM private key.
	Key string `yaml:"key"`
}

// ServiceAccountKey is the key pair service-account tokens are signed and
// verified with, both PEM.
type ServiceAccountKey struct {
	// Key is the private key (kubeadm's sa.key): one "RSA PRIVATE KEY"
	// (PKCS#1), "PRIVATE KEY" (PKCS#8) or "EC PRIVATE KEY" (SEC1) block.
	Key string `yaml:"key"`
	// Pub is the public key (kubeadm's sa.pub): one "PUBLIC KEY" (PKIX)
	// block, or "RSA PUBLIC KEY" (PKCS#1).
	Pub string `yaml:"pub"`
}

// BootstrapToken is a kubeadm bootstrap token, "<ID>.<Secret>".
type BootstrapToken struct {
	// ID is the token's public part: 6 characters from [a-z0-9].
	ID string `yaml:"id"`
	// Secret is the token's private part: 16 characters from [a-z0-9].
	Secret string `yaml:"secret"`
	// Expires is when the token stops working.
	Expires time.Time `yaml:"expires"`
}

// Generate makes a new set of cluster secrets for the cluster clusterName,
// as of now, with a bootstrap token that expires tokenTTL after now.
// tokenTTL must be positive: tokens that never expire (kubeadm's TTL 0) are
// not offered.
//
// The three CAs are self-signed ECDSA P-256 certificates with random 128-bit
// serial numbers, valid from an hour before now for ten years, their keys
// stored as SEC1 "EC PRIVATE KEY" PEM as kubeadm itself writes them. The
// service-account key is RSA 2048, stored as PKCS#1 "RSA PRIVATE KEY" PEM
// with a PKIX "PUBLIC KEY" public half. Times are stored in UTC, truncated
// to the second.
//
// The config signing key is ed25519, stored as PKCS#8 "PRIVATE KEY" PEM.
// The secrets encryption key is 32 random bytes, stored as base64.
//
// random supplies the serial numbers, the bootstrap token, the
// certificate key, the signing key and the secrets encryption key, and nil
// means crypto/rand.Reader.
// It is also handed to CA and service-account key generation, but since
// Go 1.26 crypto/ecdsa and crypto/rsa ignore it and always use the
// system's secure source (tests can make that deterministic with
// testing/cryptotest.SetGlobalRandom).
func Generate(clusterName string, now time.Time, tokenTTL time.Duration, random io.Reader) (*Secrets, error) {
	if random == nil {
		random = rand.Reader
	}
	if msg := clusterNameProblem(clusterName); msg != "" {
		return nil, fmt.Errorf("generate cluster secrets: cluster name %q: %s", clusterName, msg)
	}
	if now.IsZero() {
		return nil, errors.New("generate cluster secrets: no current time given")
	}
	if tokenTTL <= 0 {
		return nil, fmt.Errorf("generate cluster secrets: the bootstrap token's lifetime must be positive, got %v", tokenTTL)
	}
	now = now.UTC().Truncate(time.Second)
	s := &Secrets{
		APIVersion:  APIVersion,
		Kind:        Kind,
		ClusterName: clusterName,
		CreatedAt:   now,
	}
	for _, ca := range []struct {
		name string
		cn   string
		out  *KeyPair
	}{
		{"cluster CA", CACommonName, &s.CA},
		{"front-proxy CA", FrontProxyCACommonName, &s.FrontProxyCA},
		{"etcd CA", EtcdCACommonName, &s.EtcdCA},
	} {
		kp, err := newCA(ca.cn, now, random)
		if err != nil {
			return nil, fmt.Errorf("generate cluster secrets: make the %s: %w", ca.name, err)
		}
		*ca.out = kp
	}
	sa, err := newServiceAccountKey(random)
	if err != nil {
		return nil, fmt.Errorf("generate cluster secrets: make the service-account key: %w", err)
	}
	s.ServiceAccount = sa
	tok, err := newBootstrapToken(now, tokenTTL, random)
	if err != nil {
		return nil, fmt.Errorf("generate cluster secrets: %w", err)
	}
	s.BootstrapToken = tok
	key := make([]byte, certificateKeyBytes)
	if _, err := io.ReadFull(random, key); err != nil {
		return nil, fmt.Errorf("generate cluster secrets: make the certificate key: %w", err)
	}
	s.CertificateKey = hex.EncodeToString(key)
	if _, err := s.EnsureSigningKey(random); err != nil {
		return nil, fmt.Errorf("generate cluster secrets: %w", err)
	}
	if _, err := s.EnsureSecretsEncryptionKey(random); err != nil {
		return nil, fmt.Errorf("generate cluster secrets: %w", err)
	}
	if _, err := s.EnsureRecoveryKey(random); err != nil {
		return nil, fmt.Errorf("generate cluster secrets: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("generate cluster secrets: the result does not check out (a bug):\n%w", err)
	}
	return s, nil
}

// newCA makes a self-signed ECDSA P-256 CA named cn, valid from an hour
// before now for caYears years.
func newCA(cn string, now time.Time, random io.Reader) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), random)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial(random)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              []string{cn},
		NotBefore:             now.Add(-caBackdate),
		NotAfter:              now.AddDate(caYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(random, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("sign certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encode key: %w", err)
	}
	return KeyPair{
		Cert: encodePEM(blockCertificate, der),
		Key:  encodePEM(blockECPrivateKey, keyDER),
	}, nil
}

// newSerial returns a random, positive serial number of serialBits bits.
func newSerial(random io.Reader) (*big.Int, error) {
	buf := make([]byte, serialBits/8)
	for range 8 {
		if _, err := io.ReadFull(random, buf); err != nil {
			return nil, fmt.Errorf("make serial number: %w", err)
		}
		if n := new(big.Int).SetBytes(buf); n.Sign() > 0 {
			return n, nil
		}
	}
	return nil, errors.New("make serial number: the random source keeps returning zeros")
}

// newServiceAccountKey makes an RSA service-account key pair.
func newServiceAccountKey(random io.Reader) (ServiceAccountKey, error) {
	key, err := rsa.GenerateKey(random, serviceAccountKeyBits)
	if err != nil {
		return ServiceAccountKey{}, fmt.Errorf("generate key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return ServiceAccountKey{}, fmt.Errorf("encode public key: %w", err)
	}
	return ServiceAccountKey{
		Key: encodePEM(blockRSAPrivateKey, x509.MarshalPKCS1PrivateKey(key)),
		Pub: encodePEM(blockPublicKey, pub),
	}, nil
}

// newBootstrapToken makes a bootstrap token that expires ttl after now.
func newBootstrapToken(now time.Time, ttl time.Duration, random io.Reader) (BootstrapToken, error) {
	if ttl <= 0 {
		return BootstrapToken{}, fmt.Errorf("make bootstrap token: its lifetime must be positive, got %v", ttl)
	}
	chars, err := randomTokenChars(random, tokenIDLen+tokenSecretLen)
	if err != nil {
		return BootstrapToken{}, fmt.Errorf("make bootstrap token: %w", err)
	}
	return BootstrapToken{
		ID:      chars[:tokenIDLen],
		Secret:  chars[tokenIDLen:],
		Expires: now.UTC().Truncate(time.Second).Add(ttl),
	}, nil
}

// randomTokenChars returns n characters drawn uniformly from tokenChars,
// discarding random bytes that would bias the draw.
func randomTokenChars(random io.Reader, n int) (string, error) {
	const limit = 256 - 256%len(tokenChars) // 252: a multiple of 36
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for tries := 0; len(out) < n; tries++ {
		if tries == 64 {
			return "", errors.New("the random source returns too few usable bytes")
		}
		if _, err := io.ReadFull(random, buf); err != nil {
			return "", fmt.Errorf("read random bytes: %w", err)
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, tokenChars[int(b)%len(tokenChars)])
			}
		}
	}
	return string(out), nil
}

// Token returns the bootstrap token as kubeadm takes it: "<id>.<secret>".
func (s *Secrets) Token() string {
	return s.BootstrapToken.ID + "." + s.BootstrapToken.Secret
}

// CACertHash returns the hash of the cluster CA's public key in the form of
// kubeadm's --discovery-token-ca-cert-hash: "sha256:" followed by the
// lowercase hex SHA-256 of the CA certificate's DER SubjectPublicKeyInfo.
func (s *Secrets) CACertHash() (string, error) {
	cert, err := parseCertificate(s.CA.Cert)
	if err != nil {
		return "", fmt.Errorf("hash the cluster CA's public key: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// RotateToken replaces the bootstrap token with a new one that expires ttl
// after now; nothing else changes. random is as for Generate. On error the
// secrets are left as they were.
func (s *Secrets) RotateToken(now time.Time, ttl time.Duration, random io.Reader) error {
	if random == nil {
		random = rand.Reader
	}
	if now.IsZero() {
		return errors.New("rotate bootstrap token: no current time given")
	}
	tok, err := newBootstrapToken(now, ttl, random)
	if err != nil {
		return fmt.Errorf("rotate bootstrap token: %w", err)
	}
	s.BootstrapToken = tok
	return nil
}

// Files returns the files to pre-seed a control-plane node's
// /etc/kubernetes/pki with, keyed by their path relative to that directory
// ("/"-separated), exactly as kubeadm looks for them: ca.crt, ca.key,
// front-proxy-ca.crt, front-proxy-ca.key, etcd/ca.crt, etcd/ca.key, sa.key
// and sa.pub. kubeadm then makes every other certificate from these.
//
// The *.key files are secret and should be written with mode 0600 (kubeadm
// does); the rest are public. Files does not check the secrets: run
// Validate (Load does) first.
func (s *Secrets) Files() map[string][]byte {
	return map[string][]byte{
		"ca.crt":             []byte(s.CA.Cert),
		"ca.key":             []byte(s.CA.Key),
		"front-proxy-ca.crt": []byte(s.FrontProxyCA.Cert),
		"front-proxy-ca.key": []byte(s.FrontProxyCA.Key),
		"etcd/ca.crt":        []byte(s.EtcdCA.Cert),
		"etcd/ca.key":        []byte(s.EtcdCA.Key),
		"sa.key":             []byte(s.ServiceAccount.Key),
		"sa.pub":             []byte(s.ServiceAccount.Pub),
	}
}

// PEM block types.
const (
	blockCertificate    = "CERTIFICATE"
	blockECPrivateKey   = "EC PRIVATE KEY"
	blockRSAPrivateKey  = "RSA PRIVATE KEY"
	blockPKCS8Key       = "PRIVATE KEY"
	blockPublicKey      = "PUBLIC KEY"
	blockRSAPublicKey   = "RSA PUBLIC KEY"
	privateKeyBlockDesc = `"EC PRIVATE KEY", "RSA PRIVATE KEY" or "PRIVATE KEY"`
	publicKeyBlockDesc  = `"PUBLIC KEY" or "RSA PUBLIC KEY"`
)

func encodePEM(blockType string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}))
}
