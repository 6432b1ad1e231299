package backup

import (
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// PassphrasePrefix starts every backup passphrase (and names the scheme's
// version).
const PassphrasePrefix = "terrarium-backup-v1:"

// VolumesPassphrasePrefix starts every volume backup passphrase.
const VolumesPassphrasePrefix = "terrarium-volumes-v1:"

// scryptWorkFactor is age's scrypt cost (log2 N). The passphrase carries
// 256 bits from HKDF, so the cost guards nothing a guess could reach; it
// is kept low so an emulated node spends well under a second on it.
const scryptWorkFactor = 10

// Passphrase derives a cluster's backup passphrase from its CA's private
// key (PEM, as the cluster secrets and /etc/kubernetes/pki/ca.key hold it):
//
//	HKDF-SHA256(secret = the key as PKCS #8 DER,
//	            salt   = "terrarium etcd backup",
//	            info   = the cluster's name) → 32 bytes
//
// written as PassphrasePrefix + base64url (no padding). Whoever holds the
// cluster's secrets can derive it (`imagebuild config backup-key`), and
// with it decrypt a backup with the age tool (`age -d`).
func Passphrase(caKeyPEM []byte, cluster string) (string, error) {
	return derive(caKeyPEM, "terrarium etcd backup", cluster, PassphrasePrefix)
}

// VolumesPassphrase derives the passphrase of one node's volume backups
// (VolumesFileName) from the cluster CA's private key, as Passphrase
// does, with salt "terrarium volume backup" and info the cluster's name,
// a NUL byte and the node's: each node's config carries its own (workers
// hold no CA key), and it opens that node's volume backups only.
func VolumesPassphrase(caKeyPEM []byte, cluster, node string) (string, error) {
	return derive(caKeyPEM, "terrarium volume backup", cluster+"\x00"+node, VolumesPassphrasePrefix)
}

// IsVolumesPassphrase reports whether s has a volume backup passphrase's
// form: VolumesPassphrasePrefix and 32 bytes in base64url.
func IsVolumesPassphrase(s string) bool {
	rest, ok := strings.CutPrefix(s, VolumesPassphrasePrefix)
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	return err == nil && len(b) == 32
}

func derive(caKeyPEM []byte, salt, info, prefix string) (string, error) {
	der, err := canonicalKey(caKeyPEM)
	if err != nil {
		return "", fmt.Errorf("deriving the backup passphrase: the cluster CA key: %w", err)
	}
	k, err := hkdf.Key(sha256.New, der, []byte(salt), info, 32)
	if err != nil {
		return "", fmt.Errorf("deriving the backup passphrase: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(k), nil
}

// canonicalKey is a PEM private key as PKCS #8 DER, whichever of PKCS #1,
// SEC 1 or PKCS #8 it was written in.
func canonicalKey(p []byte) ([]byte, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	var (
		key any
		err error
	)
	switch b.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(b.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("a PEM %q block is not a private key", b.Type)
	}
	if err != nil {
		return nil, err
	}
	return x509.MarshalPKCS8PrivateKey(key)
}
