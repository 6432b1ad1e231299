// Package recoverykey is the key that opens a node's encrypted TERRA-STATE
// when its TPM will not: the disk moved to another machine, the TPM
// cleared, the firmware's Secure Boot keys changed.
//
// A recovery key is 128 random bits, written for a person as eight groups
// of four hex digits. It reaches the operator one of two ways, and never
// lies on the node in the clear:
//
//   - A node of a cluster made by `imagebuild config cluster` derives it
//     from the cluster's escrow key, an X25519 key pair whose private half
//     stays in the cluster's secrets and whose public half every node
//     config carries (state.recoveryKey). The node runs HPKE's sender
//     (RFC 9180, DHKEM(X25519, HKDF-SHA256), export-only) against the
//     public half and exports the recovery key; it keeps only the
//     encapsulated key, the node's recovery code, in the volume's header.
//     The operator, given the code the locked node shows, derives the same
//     key from the private half (Escrow.Recover).
//   - A standalone node without an escrow key draws one at random and
//     shows it once on its console.
//
// Both sides agree on everything here: the node makes keys, the build side
// recovers them.
package recoverykey

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Size is the size of a recovery key, in bytes.
const Size = 16

// Key is a recovery key.
type Key [Size]byte

// New draws a recovery key from random (nil: crypto/rand.Reader).
func New(random io.Reader) (Key, error) {
	if random == nil {
		random = rand.Reader
	}
	var k Key
	if _, err := io.ReadFull(random, k[:]); err != nil {
		return Key{}, fmt.Errorf("draw a recovery key: %w", err)
	}
	return k, nil
}

// String writes k as eight groups of four lowercase hex digits.
func (k Key) String() string { return group(hex.EncodeToString(k[:])) }

// Passphrase is what opens the volume's recovery keyslot: 32 bytes derived
// from k (a volume's keys are 32 bytes, statecrypt.KeySize).
func (k Key) Passphrase() []byte {
	sum := sha256.Sum256(append([]byte("terrarium TERRA-STATE recovery key v1\x00"), k[:]...))
	return sum[:]
}

// ErrKeySyntax means a typed recovery key is not one.
var ErrKeySyntax = errors.New("not a recovery key")

// Parse reads a recovery key as a person types it: 32 hex digits, in any
// case, with or without dashes and spaces between them.
func Parse(s string) (Key, error) {
	digits := ungroup(s)
	b, err := hex.DecodeString(digits)
	if err != nil || len(b) != Size {
		return Key{}, fmt.Errorf("%w: want %d hex digits (eight groups of four, as xxxx-xxxx-xxxx-xxxx-xxxx-xxxx-xxxx-xxxx), got %d characters", ErrKeySyntax, 2*Size, len(digits))
	}
	return Key(b), nil
}

// group writes s in dash-separated groups of four.
func group(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += 4 {
		if i > 0 {
			b.WriteByte('-')
		}
		b.WriteString(s[i:min(i+4, len(s))])
	}
	return b.String()
}

// ungroup drops the dashes and white space a person types between groups
// and lowers the case.
func ungroup(s string) string {
	return strings.ToLower(strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' || r == '\t' || r == '\r' || r == '\n' {
			return -1
		}
		return r
	}, s))
}

// The HPKE suite and labels of escrowed recovery keys.
const (
	info          = "terrarium TERRA-STATE recovery v1"
	exportContext = "recovery key"
)

func suite() (hpke.KEM, hpke.KDF, hpke.AEAD) {
	return hpke.DHKEM(ecdh.X25519()), hpke.HKDFSHA256(), hpke.ExportOnly()
}

// Code is a node's recovery code: the HPKE encapsulated key its recovery
// key was exported under. It is not secret: with the escrow's private half
// it gives the recovery key, without it nothing.
type Code []byte

// codeEncoding writes codes for a person to read off a screen and type:
// lowercase base32, no padding, in groups of four.
var codeEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// checkSize is the size of the check a written code ends with: a
// mistyped code is refused instead of giving a wrong key.
const checkSize = 2

func check(c []byte) []byte {
	sum := sha256.Sum256(c)
	return sum[:checkSize]
}

// String writes c for a person, its check appended.
func (c Code) String() string {
	return group(strings.ToLower(codeEncoding.EncodeToString(append(append([]byte{}, c...), check(c)...))))
}

// ErrCodeSyntax means a typed recovery code is not one.
var ErrCodeSyntax = errors.New("not a recovery code (groups of four letters and digits, as the locked node's console shows)")

// ParseCode reads a recovery code as a person types it, with or without
// the dashes, and checks it.
func ParseCode(s string) (Code, error) {
	b, err := codeEncoding.DecodeString(strings.ToUpper(ungroup(s)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCodeSyntax, err)
	}
	if len(b) <= checkSize {
		return nil, fmt.Errorf("%w: too short", ErrCodeSyntax)
	}
	c, sum := b[:len(b)-checkSize], b[len(b)-checkSize:]
	if string(check(c)) != string(sum) {
		return nil, fmt.Errorf("%w: its check does not match: a character is mistyped", ErrCodeSyntax)
	}
	return Code(c), nil
}

// PublicKey is the public half of a cluster's escrow key, as node configs
// carry it (state.recoveryKey).
type PublicKey struct{ pub hpke.PublicKey }

// publicPrefix starts an encoded escrow public key, naming its kind.
const publicPrefix = "x25519:"

// ParsePublicKey reads an escrow public key: "x25519:" and the key's 32
// bytes in standard base64.
func ParsePublicKey(s string) (PublicKey, error) {
	enc, ok := strings.CutPrefix(s, publicPrefix)
	if !ok {
		return PublicKey{}, fmt.Errorf("want %q followed by the key in base64, as imagebuild config cluster writes it", publicPrefix)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return PublicKey{}, fmt.Errorf("the key is not standard base64: %w", err)
	}
	kem, _, _ := suite()
	pub, err := kem.NewPublicKey(b)
	if err != nil {
		return PublicKey{}, fmt.Errorf("not an X25519 public key: %w", err)
	}
	return PublicKey{pub}, nil
}

// String encodes p as ParsePublicKey reads it.
func (p PublicKey) String() string {
	return publicPrefix + base64.StdEncoding.EncodeToString(p.pub.Bytes())
}

// ID names p in a few characters: the first 8 bytes of its SHA-256, in hex.
// A locked node shows it, so that the operator picks the right cluster's
// secrets.
func (p PublicKey) ID() string {
	sum := sha256.Sum256(p.pub.Bytes())
	return hex.EncodeToString(sum[:8])
}

// Seal makes a recovery key that p's private half can recover, and the
// code it recovers it from.
func (p PublicKey) Seal() (Key, Code, error) {
	_, kdf, aead := suite()
	enc, sender, err := hpke.NewSender(p.pub, kdf, aead, []byte(info))
	if err != nil {
		return Key{}, nil, fmt.Errorf("make a recovery key for escrow key %s: %w", p.ID(), err)
	}
	b, err := sender.Export(exportContext, Size)
	if err != nil {
		return Key{}, nil, fmt.Errorf("make a recovery key for escrow key %s: %w", p.ID(), err)
	}
	return Key(b), Code(enc), nil
}

// Escrow is a cluster's escrow key: the private half, which recovers every
// node's recovery key from its code.
type Escrow struct{ priv *ecdh.PrivateKey }

// NewEscrow makes an escrow key from random (nil: crypto/rand.Reader).
func NewEscrow(random io.Reader) (Escrow, error) {
	if random == nil {
		random = rand.Reader
	}
	priv, err := ecdh.X25519().GenerateKey(random)
	if err != nil {
		return Escrow{}, fmt.Errorf("make the recovery escrow key: %w", err)
	}
	return Escrow{priv}, nil
}

// pemType is the PEM block an escrow key is stored as (PKCS#8).
const pemType = "PRIVATE KEY"

// ParseEscrow reads an escrow key: one PEM "PRIVATE KEY" block (PKCS#8)
// holding an X25519 key.
func ParseEscrow(s string) (Escrow, error) {
	b, rest := pem.Decode([]byte(s))
	if b == nil || b.Type != pemType || strings.TrimSpace(string(rest)) != "" {
		return Escrow{}, fmt.Errorf("want one PEM %q block", pemType)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return Escrow{}, fmt.Errorf("PKCS#8: %w", err)
	}
	priv, ok := k.(*ecdh.PrivateKey)
	if !ok || priv.Curve() != ecdh.X25519() {
		return Escrow{}, fmt.Errorf("a %T, want an X25519 key", k)
	}
	return Escrow{priv}, nil
}

// String encodes e as ParseEscrow reads it.
func (e Escrow) String() string {
	der, err := x509.MarshalPKCS8PrivateKey(e.priv)
	if err != nil {
		panic(fmt.Sprintf("recoverykey: marshal an X25519 key: %v", err)) // cannot fail for X25519
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}))
}

// Public is e's public half.
func (e Escrow) Public() PublicKey {
	pub, err := hpke.NewDHKEMPublicKey(e.priv.PublicKey())
	if err != nil {
		panic(fmt.Sprintf("recoverykey: an X25519 public key: %v", err)) // cannot fail for X25519
	}
	return PublicKey{pub}
}

// Recover gives the recovery key of the node that showed code.
func (e Escrow) Recover(code Code) (Key, error) {
	priv, err := hpke.NewDHKEMPrivateKey(e.priv)
	if err != nil {
		return Key{}, err
	}
	_, kdf, aead := suite()
	r, err := hpke.NewRecipient(code, priv, kdf, aead, []byte(info))
	if err != nil {
		return Key{}, fmt.Errorf("recover with escrow key %s: the code is not one of its nodes' (%w)", e.Public().ID(), err)
	}
	b, err := r.Export(exportContext, Size)
	if err != nil {
		return Key{}, err
	}
	return Key(b), nil
}
