package signature

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// keyPrefix starts the text form of a public key.
const keyPrefix = "ed25519:"

// pemType is the PEM block type of a private key (PKCS#8).
const pemType = "PRIVATE KEY"

// PublicKey is an ed25519 public key that config signatures are checked
// with. Its text form (String, ParsePublicKey) is "ed25519:" followed by the
// standard base64 of the 32 key bytes. The zero PublicKey is no key: no
// signature verifies with it, and ParsePublicKey never returns it. A
// PublicKey is comparable with == and usable as a map key.
type PublicKey struct {
	key [ed25519.PublicKeySize]byte
}

// String returns the text form, "ed25519:<base64>".
func (k PublicKey) String() string {
	return keyPrefix + base64.StdEncoding.EncodeToString(k.key[:])
}

// ID returns a short name for the key: the first 16 hex digits of the
// SHA-256 of its 32 bytes.
func (k PublicKey) ID() string {
	sum := sha256.Sum256(k.key[:])
	return hex.EncodeToString(sum[:8])
}

// ParsePublicKey parses the text form of a public key, "ed25519:<base64>"
// exactly as String writes it. Its errors say what is wrong and how to fix
// it, without naming where s came from.
func ParsePublicKey(s string) (PublicKey, error) {
	const want = "write it as ed25519:<base64 of 32 bytes>, " +
		"the line of the .pub file from `imagebuild config keygen`"
	switch {
	case strings.TrimSpace(s) == "":
		return PublicKey{}, errors.New("empty key; " + want)
	case strings.HasPrefix(s, "-----BEGIN"):
		return PublicKey{}, errors.New("this is a PEM block (a private key?); keep the private key secret and " + want)
	case strings.HasPrefix(s, "ssh-"), strings.HasPrefix(s, "sk-"), strings.HasPrefix(s, "ecdsa-"):
		return PublicKey{}, errors.New("this is an SSH key, which does not sign configs; " + want)
	case !strings.HasPrefix(s, keyPrefix):
		return PublicKey{}, fmt.Errorf("%q is not a config signing key; %s", abbreviate(s), want)
	}
	b64 := strings.TrimPrefix(s, keyPrefix)
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || base64.StdEncoding.EncodeToString(raw) != b64 {
		return PublicKey{}, fmt.Errorf("%q: the key is not valid base64 (cut short, wrapped, or with spaces?); %s", abbreviate(s), want)
	}
	if len(raw) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("%q holds %d bytes; an ed25519 key has %d; %s", abbreviate(s), len(raw), ed25519.PublicKeySize, want)
	}
	var k PublicKey
	copy(k.key[:], raw)
	if k == (PublicKey{}) {
		return PublicKey{}, fmt.Errorf("%q is all zeros, not a real key; %s", abbreviate(s), want)
	}
	return k, nil
}

// abbreviate shortens s for an error message.
func abbreviate(s string) string {
	const maxLen = 72
	if len(s) > maxLen {
		return s[:maxLen] + "..."
	}
	return s
}

// PublicKeyOf returns the public half of key. Like ed25519's own
// functions, it panics when key is not ed25519.PrivateKeySize bytes long.
func PublicKeyOf(key ed25519.PrivateKey) PublicKey {
	if len(key) != ed25519.PrivateKeySize {
		panic(fmt.Sprintf("signature: bad private key length %d", len(key)))
	}
	var k PublicKey
	copy(k.key[:], key.Public().(ed25519.PublicKey))
	return k
}

// GenerateKey makes a new signing key from crypto/rand and returns it with
// its public half.
func GenerateKey() (ed25519.PrivateKey, PublicKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, PublicKey{}, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return priv, PublicKeyOf(priv), nil
}

// MarshalPrivateKey encodes key as one PEM "PRIVATE KEY" block (PKCS#8),
// the form ParsePrivateKey reads and `openssl pkey` understands.
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("encode signing key: it is %d bytes; an ed25519 private key has %d", len(key), ed25519.PrivateKeySize)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}), nil
}

// ParsePrivateKey decodes a signing key written by MarshalPrivateKey: one
// PEM "PRIVATE KEY" block (PKCS#8) holding an ed25519 key, with nothing but
// whitespace around it.
func ParsePrivateKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	const want = "want one PEM \"PRIVATE KEY\" block (PKCS#8) holding an ed25519 key, as `imagebuild config keygen` writes it"
	trimmed := bytes.TrimSpace(pemBytes)
	switch {
	case len(trimmed) == 0:
		return nil, errors.New("empty file; " + want)
	case bytes.HasPrefix(trimmed, []byte(keyPrefix)):
		return nil, errors.New("this is a public key (the .pub file), which cannot sign; " + want)
	case !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")):
		return nil, errors.New("not PEM; " + want)
	}
	block, rest := pem.Decode(trimmed)
	switch {
	case block == nil:
		return nil, errors.New("not valid PEM (cut short or garbled?); " + want)
	case block.Type != pemType:
		return nil, fmt.Errorf("a PEM %q block; %s", block.Type, want)
	case len(block.Headers) > 0:
		return nil, errors.New("a PEM block with headers (encrypted?); " + want)
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, errors.New("more than one PEM block; " + want)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the PEM block does not parse as PKCS#8 (%w); %s", err, want)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("an %s key, not ed25519; %s", keyType(key), want)
	}
	return priv, nil
}

// keyType names the algorithm of a parsed private key.
func keyType(key any) string {
	s := fmt.Sprintf("%T", key) // like *rsa.PrivateKey
	s = strings.TrimPrefix(s, "*")
	s, _, _ = strings.Cut(s, ".")
	return strings.ToUpper(s)
}

// LoadPrivateKey reads a signing key from the file path (see
// ParsePrivateKey). Its errors name the file.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load signing key: %w", err)
	}
	key, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return key, nil
}
