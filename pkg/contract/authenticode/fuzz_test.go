package authenticode

import (
	"crypto/x509"
	"errors"
	"testing"
)

// FuzzVerify feeds images from outside (an upgrade file's UKIs) to Verify:
// it never panics, refuses with one of its errors, and accepts only what
// the trusted key signed.
func FuzzVerify(f *testing.F) {
	db := newSigner(f, "db", nil)
	signed, err := Sign(testPE(), db.key, db.cert)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	f.Add(testPE())
	trusted := []*x509.Certificate{db.cert}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Verify(data, trusted)
		if err != nil {
			for _, known := range []error{ErrMalformed, ErrUnsigned, ErrBadSignature, ErrNotTrusted} {
				if errors.Is(err, known) {
					return
				}
			}
			t.Fatalf("an error of no kind: %v", err)
		}
		if !got.Equal(db.cert) {
			t.Fatalf("accepted a signer that is not the trusted one: %s", got.Subject)
		}
	})
}

// FuzzSign feeds images to Sign: it never panics, refuses only with
// ErrMalformed or ErrSigned, and what it signs verifies.
func FuzzSign(f *testing.F) {
	db := newSigner(f, "db", nil)
	f.Add(testPE())
	trusted := []*x509.Certificate{db.cert}
	f.Fuzz(func(t *testing.T, data []byte) {
		signed, err := Sign(data, db.key, db.cert)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrSigned) {
				t.Fatalf("an error of no kind: %v", err)
			}
			return
		}
		if _, err := Verify(signed, trusted); err != nil {
			t.Fatalf("what Sign wrote does not verify: %v", err)
		}
	})
}
