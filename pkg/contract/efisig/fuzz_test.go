package efisig

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseSignatureLists feeds .esl files (a variable's content) to
// ParseSignatureLists: only ErrMalformed; what it accepts is written back
// byte for byte, and Certificates fails only with ErrMalformed.
func FuzzParseSignatureLists(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		lists, err := ParseSignatureLists(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		again, err := MarshalSignatureLists(lists...)
		if err != nil {
			t.Fatalf("write back what was read: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatal("what was read writes back different")
		}
		if _, err := Certificates(lists); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Certificates: error does not wrap ErrMalformed: %v", err)
		}
	})
}
