package signature

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

// FuzzParsePublicKey feeds trusted-key lines (the seed corpus is in
// testdata/fuzz/FuzzParsePublicKey) to ParsePublicKey: it never panics,
// fails with a message, and accepts only what String writes back
// unchanged.
func FuzzParsePublicKey(f *testing.F) {
	f.Add(PublicKeyOf(fixedKey(1)).String())
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublicKey(s)
		if err != nil {
			if k != (PublicKey{}) || err.Error() == "" {
				t.Fatalf("ParsePublicKey(%q) failed (%v) but returned a key", s, err)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("ParsePublicKey(%q) accepted a key String writes as %q", s, k.String())
		}
		if len(k.ID()) != 16 {
			t.Fatalf("key ID %q is not 16 hex digits", k.ID())
		}
	})
}

// FuzzParsePrivateKey feeds signing-key files (the seed corpus is in
// testdata/fuzz/FuzzParsePrivateKey) to ParsePrivateKey: it never panics,
// and a key it accepts is a whole ed25519 key that signs what its public
// half verifies, and that MarshalPrivateKey writes back in a form
// ParsePrivateKey reads to the same key.
func FuzzParsePrivateKey(f *testing.F) {
	if pemBytes, err := MarshalPrivateKey(fixedKey(1)); err == nil {
		f.Add(pemBytes)
	}
	// A PKCS#8 key of another algorithm (X25519, deterministic).
	if x, err := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{2}, 32)); err == nil {
		if der, err := x509.MarshalPKCS8PrivateKey(x); err == nil {
			f.Add(pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := ParsePrivateKey(data)
		if err != nil {
			if key != nil {
				t.Fatalf("ParsePrivateKey failed (%v) but returned a key", err)
			}
			return
		}
		if len(key) != ed25519.PrivateKeySize {
			t.Fatalf("ParsePrivateKey returned a %d-byte key", len(key))
		}
		pub := PublicKeyOf(key)
		if _, err := Verify(Sign(key, []byte(config)), []byte(config), []PublicKey{pub}); err != nil {
			t.Fatalf("a parsed key's signature does not verify: %v", err)
		}
		again, err := MarshalPrivateKey(key)
		if err != nil {
			t.Fatalf("MarshalPrivateKey of a parsed key: %v", err)
		}
		key2, err := ParsePrivateKey(again)
		if err != nil || !bytes.Equal(key2, key) {
			t.Fatalf("round trip changed the key (%v)", err)
		}
	})
}
