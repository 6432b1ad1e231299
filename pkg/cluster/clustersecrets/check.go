package clustersecrets

import (
	"crypto/rsa"
	"crypto/x509"
	"strings"
	"time"
	"unicode"

	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// Validate checks everything about the secrets that does not depend on the
// clock: apiVersion and kind, the cluster name, that every certificate and
// key is one PEM block that parses, that each key matches its certificate,
// that the CAs are CAs and distinct, the format of the bootstrap token's ID
// and secret, that the certificate key is 64 lowercase hex digits, that
// the config signing key, when there is one, is an ed25519 key, and that
// the secrets encryption key, when there is one, is 32 bytes of base64.
//
// It returns nil or a strictyaml.Problems listing every problem found, one
// per line, each naming its field by path (e.g. "$.etcdCA.key: ...").
// Load and Save run Validate; neither runs CheckExpiry.
func (s *Secrets) Validate() error {
	return s.problems(true, false, time.Time{}).Err()
}

// CheckExpiry checks the secrets against the time now: that each CA is
// valid at now (neither expired nor not yet valid) and that the bootstrap
// token has not expired. A problem with the token says when it expired and
// that `imagebuild config cluster --rotate-token` makes a new one.
//
// It returns nil or a strictyaml.Problems. A certificate that does not
// parse is reported as such, since its validity cannot be told; everything
// else Validate checks is left to Validate.
func (s *Secrets) CheckExpiry(now time.Time) error {
	return s.problems(false, true, now).Err()
}

// Check runs the checks of both Validate and CheckExpiry (at now) and
// returns nil or a strictyaml.Problems listing every problem found, one per
// line, each naming its field by path.
func (s *Secrets) Check(now time.Time) error {
	return s.problems(true, true, now).Err()
}

// problems runs the structural checks when structure is set and the
// time-dependent ones, at now, when expiry is set.
func (s *Secrets) problems(structure, expiry bool, now time.Time) strictyaml.Problems {
	var ps strictyaml.Problems
	root := strictyaml.Root()
	if structure {
		if s.APIVersion != APIVersion {
			ps.Addf(root.Field("apiVersion"), "is %q; want %q", s.APIVersion, APIVersion)
		}
		if s.Kind != Kind {
			ps.Addf(root.Field("kind"), "is %q; want %q", s.Kind, Kind)
		}
		if msg := clusterNameProblem(s.ClusterName); msg != "" {
			ps.Addf(root.Field("clusterName"), "%s", msg)
		}
		if s.CreatedAt.IsZero() {
			ps.Addf(root.Field("createdAt"), "is missing: want the time the secrets were made")
		}
	}

	type parsedCA struct {
		path strictyaml.Path
		cert *x509.Certificate
	}
	var cas []parsedCA
	for _, ca := range []struct {
		field string
		kp    KeyPair
	}{
		{"ca", s.CA},
		{"frontProxyCA", s.FrontProxyCA},
		{"etcdCA", s.EtcdCA},
	} {
		p := root.Field(ca.field)
		cert := checkCA(&ps, p, ca.kp, structure)
		if cert == nil {
			continue
		}
		if expiry {
			checkValidity(&ps, p.Field("cert"), cert, now)
		}
		if structure {
			for _, other := range cas {
				if samePublicKey(cert.PublicKey, other.cert.PublicKey) {
					ps.Addf(p.Field("cert"), "has the same key as %s; each CA needs its own key", other.path.Field("cert"))
				}
			}
		}
		cas = append(cas, parsedCA{p, cert})
	}

	if structure {
		checkServiceAccount(&ps, root.Field("serviceAccount"), s.ServiceAccount)
	}

	tp := root.Field("bootstrapToken")
	if structure {
		if !isTokenPart(s.BootstrapToken.ID, tokenIDLen) {
			ps.Addf(tp.Field("id"), "is %q; want %d characters from [a-z0-9]", s.BootstrapToken.ID, tokenIDLen)
		}
		if !isTokenPart(s.BootstrapToken.Secret, tokenSecretLen) {
			ps.Addf(tp.Field("secret"), "is not %d characters from [a-z0-9]", tokenSecretLen)
		}
	}
	if exp := s.BootstrapToken.Expires; exp.IsZero() {
		// Both kinds of check need it; problems runs at least one.
		ps.Addf(tp.Field("expires"), "is missing: want the time the token stops working; make a new token with `%s`", RotateTokenCommand)
	} else if expiry && !now.Before(exp) {
		ps.Addf(tp.Field("expires"), "the bootstrap token expired at %s (%s ago); make a new one with `%s`",
			exp.UTC().Format(time.RFC3339), now.Sub(exp).Round(time.Second), RotateTokenCommand)
	}

	if structure && !isLowerHex(s.CertificateKey, 2*certificateKeyBytes) {
		ps.Addf(root.Field("certificateKey"), "is not %d lowercase hex digits (%d random bytes)", 2*certificateKeyBytes, certificateKeyBytes)
	}
	if structure && s.SigningKey != "" {
		// Absent is allowed: files from before the key get one from
		// EnsureSigningKey on their next write.
		if _, err := signature.ParsePrivateKey([]byte(s.SigningKey)); err != nil {
			ps.Addf(root.Field("signingKey"), "%v", err)
		}
	}
	if structure && s.RecoveryKey != "" {
		// Absent is allowed, as for signingKey.
		if _, err := recoverykey.ParseEscrow(s.RecoveryKey); err != nil {
			ps.Addf(root.Field("recoveryKey"), "%v", err)
		}
	}
	if structure && s.SecretsEncryptionKey != "" {
		// Absent is allowed, as for signingKey.
		if msg := encryptionKeyProblem(s.SecretsEncryptionKey); msg != "" {
			ps.Addf(root.Field("secretsEncryptionKey"), "%s", msg)
		}
	}
	if structure {
		seen := map[string]bool{s.SecretsEncryptionKey: true}
		for i, k := range s.RetiredSecretsEncryptionKeys {
			f := root.Field("retiredSecretsEncryptionKeys").Index(i)
			if msg := encryptionKeyProblem(k); msg != "" {
				ps.Addf(f, "%s", msg)
			}
			if seen[k] {
				ps.Addf(f, "is the current key or an earlier entry again; each key is listed once")
			}
			seen[k] = true
		}
	}
	return ps
}

// checkCA checks the CA key pair at p and returns its certificate, or nil
// when that does not parse. Only a certificate that does not parse is
// reported unless structure is set.
func checkCA(ps *strictyaml.Problems, p strictyaml.Path, kp KeyPair, structure bool) *x509.Certificate {
	cert, err := parseCertificate(kp.Cert)
	if err != nil {
		ps.Addf(p.Field("cert"), "%v", err)
	}
	if !structure {
		return cert
	}
	if cert != nil {
		switch {
		case !cert.BasicConstraintsValid || !cert.IsCA:
			ps.Addf(p.Field("cert"), "is not a CA certificate: its basic constraints do not say CA:TRUE")
		case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
			ps.Addf(p.Field("cert"), "is not allowed to sign certificates: its key usage lacks certSign")
		}
		switch cert.PublicKeyAlgorithm {
		case x509.RSA, x509.ECDSA:
		default:
			ps.Addf(p.Field("cert"), "has a %v key; kubeadm takes RSA or ECDSA keys", cert.PublicKeyAlgorithm)
		}
	}
	key, err := parsePrivateKey(kp.Key)
	if err != nil {
		ps.Addf(p.Field("key"), "%v", err)
		return cert
	}
	if cert != nil && !samePublicKey(key.Public(), cert.PublicKey) {
		ps.Addf(p.Field("key"), "does not match the certificate in %s (a key from another pair?)", p.Field("cert"))
	}
	return cert
}

// checkValidity checks that cert, at path p, is valid at now.
func checkValidity(ps *strictyaml.Problems, p strictyaml.Path, cert *x509.Certificate, now time.Time) {
	switch {
	case now.Before(cert.NotBefore):
		ps.Addf(p, "is not valid until %s, and it is %s now; is this machine's clock right?",
			cert.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case now.After(cert.NotAfter):
		ps.Addf(p, "expired at %s; the cluster needs new CAs", cert.NotAfter.UTC().Format(time.RFC3339))
	}
}

// checkServiceAccount checks the service-account key pair at p.
func checkServiceAccount(ps *strictyaml.Problems, p strictyaml.Path, sa ServiceAccountKey) {
	key, keyErr := parsePrivateKey(sa.Key)
	if keyErr != nil {
		ps.Addf(p.Field("key"), "%v", keyErr)
	} else if rk, ok := key.(*rsa.PrivateKey); ok && rk.N.BitLen() < serviceAccountKeyBits {
		ps.Addf(p.Field("key"), "is a %d-bit RSA key; want at least %d bits", rk.N.BitLen(), serviceAccountKeyBits)
	}
	pub, pubErr := parsePublicKey(sa.Pub)
	if pubErr != nil {
		ps.Addf(p.Field("pub"), "%v", pubErr)
	}
	if keyErr == nil && pubErr == nil && !samePublicKey(key.Public(), pub) {
		ps.Addf(p.Field("pub"), "is not the public half of %s", p.Field("key"))
	}
}

// clusterNameProblem says what is wrong with a cluster name, or "".
func clusterNameProblem(name string) string {
	switch {
	case name == "":
		return "is missing: want the cluster's name"
	case strings.TrimSpace(name) != name:
		return "has leading or trailing space"
	case strings.ContainsFunc(name, unicode.IsControl):
		return "has control characters"
	}
	return ""
}

// isTokenPart reports whether s is n characters from [a-z0-9].
func isTokenPart(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// isLowerHex reports whether s is n lowercase hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'f') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
