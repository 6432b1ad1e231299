package secureboot

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// fixKeySet is what to do about a key set file that is missing or bad.
const fixKeySet = "restore the key set directory from the site's backup, or make a new key set (every machine that enrolled the old one must then enroll the new one)"

// keySetError is a problem with one file of a key set, with the fix. It
// wraps ErrKeySet and the problem (for a file-system error, the error
// without its path, which the message names anyway).
type keySetError struct {
	path, fix string
	err       error
}

func newKeySetError(path string, problem error, fix string) error {
	var pe *fs.PathError
	if errors.As(problem, &pe) {
		problem = pe.Err
	}
	return &keySetError{path: path, fix: fix, err: problem}
}

func (e *keySetError) Error() string   { return fmt.Sprintf("%s: %v: %s", e.path, e.err, e.fix) }
func (e *keySetError) Unwrap() []error { return []error{ErrKeySet, e.err} }

// Load reads the key set in dir and checks it: each of PK, KEK and db has
// a PEM certificate and an RSA-2048 private key (PKCS#8 or PKCS#1, not
// readable by group or others) that belong together, the certificates are
// valid now and distinct, and the owner GUID parses. An error names the
// file and what to do. A key set made elsewhere (e.g. by openssl) loads
// too, given these file names.
func Load(dir string, opts ...Option) (*KeySet, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("load Secure Boot keys from %s: %w", dir, err)
	}
	ks := &KeySet{Dir: dir}
	ownerPath := filepath.Join(dir, OwnerFile)
	b, err := os.ReadFile(ownerPath)
	if err != nil {
		return nil, fmt.Errorf("load Secure Boot keys: %w", newKeySetError(ownerPath, err, fixKeySet))
	}
	if ks.Owner, err = efisig.ParseGUID(strings.TrimSpace(string(b))); err != nil {
		return nil, fmt.Errorf("load Secure Boot keys: %w", newKeySetError(ownerPath, err, "write the owner GUID the key set's lists carry (e.g. from uuidgen, once) into it"))
	}
	seen := map[string]Role{}
	for _, r := range Roles() {
		k, err := loadKey(dir, r, o.now)
		if err != nil {
			return nil, fmt.Errorf("load Secure Boot keys: %w", err)
		}
		pub := string(k.Cert.RawSubjectPublicKeyInfo)
		if other, dup := seen[pub]; dup {
			return nil, fmt.Errorf("load Secure Boot keys: %w", newKeySetError(k.CertFile,
				fmt.Errorf("the %s certificate has the %s's key", r, other), "each role needs a key of its own: "+fixKeySet))
		}
		seen[pub] = r
		*ks.Key(r) = *k
	}
	if len(ks.PK.Cert.Subject.Organization) > 0 {
		ks.Site = ks.PK.Cert.Subject.Organization[0]
	}
	return ks, nil
}

// loadKey reads and checks one role's certificate and key.
func loadKey(dir string, r Role, now time.Time) (*Key, error) {
	k := &Key{Role: r, CertFile: filepath.Join(dir, string(r)+certExt), KeyFile: filepath.Join(dir, string(r)+keyExt)}
	cert, err := readCert(k.CertFile)
	if err != nil {
		return nil, err
	}
	if now.Before(cert.NotBefore) {
		return nil, newKeySetError(k.CertFile, fmt.Errorf("not valid before %s", cert.NotBefore.Format(time.RFC3339)),
			"check the build host's clock")
	}
	if now.After(cert.NotAfter) {
		return nil, newKeySetError(k.CertFile, fmt.Errorf("expired on %s", cert.NotAfter.Format(time.RFC3339)),
			"make a new key set and enroll it on every machine")
	}
	priv, err := readKey(k.KeyFile)
	if err != nil {
		return nil, err
	}
	if !priv.PublicKey.Equal(cert.PublicKey) {
		return nil, newKeySetError(k.KeyFile, fmt.Errorf("not the key of %s", k.CertFile),
			"put the matching key and certificate together: "+fixKeySet)
	}
	k.Cert, k.Private = cert, priv
	return k, nil
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, newKeySetError(path, err, fixKeySet)
	}
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, newKeySetError(path, errors.New("not a PEM certificate"), fixKeySet)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, newKeySetError(path, errors.New("more than one PEM block"), "keep the role's own certificate only")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, newKeySetError(path, err, fixKeySet)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok || pub.N.BitLen() != KeyBits {
		return nil, newKeySetError(path, errors.New("the certificate's key is not RSA-2048, the size every UEFI firmware verifies"), fixKeySet)
	}
	return cert, nil
}

func readKey(path string) (*rsa.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, newKeySetError(path, err, fixKeySet)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, newKeySetError(path, fmt.Errorf("a private key readable by others (mode %04o)", fi.Mode().Perm()),
			"chmod 600 "+path+" (and keep the directory private)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, newKeySetError(path, err, fixKeySet)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, newKeySetError(path, errors.New("not a PEM private key"), fixKeySet)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, newKeySetError(path, fmt.Errorf("a PEM %q block, not an unencrypted private key", block.Type),
			"store the key unencrypted (sbsign reads it without a passphrase): "+fixKeySet)
	}
	if err != nil {
		return nil, newKeySetError(path, err, fixKeySet)
	}
	priv, ok := key.(*rsa.PrivateKey)
	if !ok || priv.N.BitLen() != KeyBits {
		return nil, newKeySetError(path, errors.New("not an RSA-2048 key, the size every UEFI firmware verifies"), fixKeySet)
	}
	return priv, nil
}
