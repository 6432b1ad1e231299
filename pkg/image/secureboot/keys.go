// Package secureboot makes, on the build host, what a Secure Boot chain
// under a site's own keys needs: the site's key set (PK, KEK, db), the
// files a firmware in setup mode enrolls (EFI signature lists and signed
// authenticated variable updates), unified kernel images (UKIs: kernel,
// initramfs and command line in one PE behind systemd-stub), and
// signatures on PE binaries with the db key (sbsigntool). The signature
// lists, the variable updates and the UKIs are written in Go and checked
// against efitools, sbverify and binutils in the tests
// (docs/secure-boot.md).
package secureboot

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// Role is a key's place in the Secure Boot hierarchy, and the name of the
// firmware variable its certificate is enrolled in.
type Role string

// The roles of a key set: the platform key (owns the platform, signs
// updates of PK and KEK), the key exchange key (signs updates of db) and
// the signature database key (signs the boot loader and the UKIs).
const (
	PK  Role = "PK"
	KEK Role = "KEK"
	DB  Role = "db"
)

// Roles are the key set's roles, PK first.
func Roles() []Role { return []Role{PK, KEK, DB} }

// KeyBits is the size of the RSA keys: RSA-2048 is the size the UEFI
// specification requires every firmware to verify.
const KeyBits = 2048

// Validity of a generated certificate. Firmware does not check certificate
// times, but sbsign, openssl and Load do.
const Validity = 10 * 365 * 24 * time.Hour

// File names in a key set directory.
const (
	// OwnerFile holds the owner GUID, in text form, that the key set's
	// signature lists carry.
	OwnerFile = "owner.guid"
	keyExt    = ".key" // PEM PKCS#8 (or PKCS#1) RSA private key, mode 0600
	certExt   = ".crt" // PEM X.509 certificate
)

// Key is one role's key pair and the files that hold it.
type Key struct {
	Role     Role
	Cert     *x509.Certificate
	Private  *rsa.PrivateKey
	CertFile string // host path of the PEM certificate (sbsign --cert)
	KeyFile  string // host path of the PEM private key (sbsign --key)
}

// KeySet is a site's Secure Boot keys, as a directory holding PK, KEK and
// db (each ROLE.key and ROLE.crt) and the owner GUID.
type KeySet struct {
	Dir   string
	Site  string // the PK certificate's organization (empty if it has none)
	Owner efisig.GUID
	PK    Key
	KEK   Key
	DB    Key
}

// Key returns the key of role r.
func (ks *KeySet) Key(r Role) *Key {
	switch r {
	case PK:
		return &ks.PK
	case KEK:
		return &ks.KEK
	case DB:
		return &ks.DB
	}
	return nil
}

// Option sets an optional input of Generate or Load.
type Option func(*options) error

type options struct {
	now time.Time
}

// WithTime sets the time at which certificates begin (Generate) or are
// checked (Load); the default is the time of the call.
func WithTime(t time.Time) Option {
	return func(o *options) error {
		if t.IsZero() {
			return errors.New("WithTime: zero time")
		}
		o.now = t
		return nil
	}
}

func makeOptions(opts []Option) (options, error) {
	o := options{now: time.Now()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// ValidSite reports whether site can name a key set: 1 to 40 of
// A-Z a-z 0-9 . _ -, starting with a letter or digit. The name is a
// directory on the ESP (loader/keys/SITE) and part of the certificates'
// subjects.
func ValidSite(site string) error {
	if site == "" || len(site) > 40 {
		return fmt.Errorf("site name %q: want 1 to 40 characters", site)
	}
	for i, c := range site {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("site name %q: want letters, digits, '.', '_' and '-', starting with a letter or digit", site)
		}
	}
	return nil
}

// Generate makes a new key set for site in dir (created 0700 if absent,
// and which must hold no key set yet): an RSA-2048 key and a self-signed
// SHA-256 certificate, valid for ten years, for each of PK, KEK and db,
// and a random owner GUID. The keys are written 0600. Generate never
// replaces a key set: a machine that enrolled one accepts only what its
// keys signed.
func Generate(dir, site string, opts ...Option) (*KeySet, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("generate Secure Boot keys in %s: %w", dir, err)
	}
	if err := ValidSite(site); err != nil {
		return nil, fmt.Errorf("generate Secure Boot keys in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("generate Secure Boot keys: %w", err)
	}
	for _, name := range keySetFiles() {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return nil, fmt.Errorf("generate Secure Boot keys in %s: %s exists: a key set is never replaced; use another directory, or Load this one", dir, name)
		}
	}
	owner, err := efisig.NewGUID()
	if err != nil {
		return nil, fmt.Errorf("generate Secure Boot keys in %s: %w", dir, err)
	}
	ks := &KeySet{Dir: dir, Site: site, Owner: owner}
	for _, r := range Roles() {
		k, err := newKey(r, site, o.now)
		if err != nil {
			return nil, fmt.Errorf("generate Secure Boot keys in %s: %s: %w", dir, r, err)
		}
		k.CertFile, k.KeyFile = filepath.Join(dir, string(r)+certExt), filepath.Join(dir, string(r)+keyExt)
		*ks.Key(r) = *k
	}
	if err := ks.write(); err != nil {
		return nil, fmt.Errorf("generate Secure Boot keys in %s: %w", dir, err)
	}
	return ks, nil
}

// keySetFiles are the files of a key set directory.
func keySetFiles() []string {
	names := []string{OwnerFile}
	for _, r := range Roles() {
		names = append(names, string(r)+keyExt, string(r)+certExt)
	}
	return names
}

func newKey(r Role, site string, now time.Time) (*Key, error) {
	priv, err := rsa.GenerateKey(rand.Reader, KeyBits)
	if err != nil {
		return nil, fmt.Errorf("make the RSA key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("make a serial number: %w", err)
	}
	subject := pkix.Name{
		CommonName:         fmt.Sprintf("%s Secure Boot %s", site, r), // at most 56 of the 64 characters a CN may have
		Organization:       []string{site},
		OrganizationalUnit: []string{"Terrarium Secure Boot"},
	}
	// Like `openssl req -x509`: a self-signed CA certificate, which every
	// firmware takes as PK, KEK or db entry and as a signer.
	tmpl := &x509.Certificate{
		SerialNumber:          serial.Add(serial, big.NewInt(1)),
		Subject:               subject,
		Issuer:                subject,
		NotBefore:             now.Add(-time.Hour).UTC().Truncate(time.Second),
		NotAfter:              now.Add(-time.Hour + Validity).UTC().Truncate(time.Second),
		SignatureAlgorithm:    x509.SHA256WithRSA,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, fmt.Errorf("make the certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("read back the certificate: %w", err)
	}
	return &Key{Role: r, Cert: cert, Private: priv}, nil
}

// write writes the key set's files, keys 0600, each created anew; on an
// error it removes what it wrote.
func (ks *KeySet) write() (err error) {
	var written []string
	defer func() {
		if err != nil {
			for _, p := range written {
				_ = os.Remove(p)
			}
		}
	}()
	create := func(path string, mode os.FileMode, data []byte) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		written = append(written, path)
		if _, err := f.Write(data); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	for _, r := range Roles() {
		k := ks.Key(r)
		der, err := x509.MarshalPKCS8PrivateKey(k.Private)
		if err != nil {
			return fmt.Errorf("encode the %s key: %w", r, err)
		}
		if err := create(k.KeyFile, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
			return err
		}
		if err := create(k.CertFile, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.Cert.Raw})); err != nil {
			return err
		}
	}
	return create(filepath.Join(ks.Dir, OwnerFile), 0o644, []byte(ks.Owner.String()+"\n"))
}
