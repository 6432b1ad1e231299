package cms

import (
	"encoding/asn1"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

func TestAlgorithm(t *testing.T) {
	var b cryptobyte.Builder
	AddAlgorithm(&b, OIDSHA256())
	der, err := b.Bytes()
	require.NoError(t, err)
	// sha256 with NULL parameters, as openssl and efitools write it.
	assert.Equal(t, []byte{0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00}, der)
	s := cryptobyte.String(der)
	oid, ok := ReadAlgorithm(&s)
	require.True(t, ok)
	assert.True(t, oid.Equal(OIDSHA256()))
	assert.True(t, s.Empty())

	absent := func() []byte {
		var b cryptobyte.Builder
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(OIDRSAEncryption()) })
		return b.BytesOrPanic()
	}()
	withInt := func() []byte {
		var b cryptobyte.Builder
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1ObjectIdentifier(OIDRSAEncryption())
			b.AddASN1Int64(1)
		})
		return b.BytesOrPanic()
	}()
	for _, tc := range []struct {
		name string
		der  []byte
		want asn1.ObjectIdentifier
	}{
		{"parameters absent", absent, OIDRSAEncryption()},
		{"parameters not NULL", withInt, nil},
		{"not a SEQUENCE", []byte{0x04, 0x00}, nil},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cryptobyte.String(tc.der)
			oid, ok := ReadAlgorithm(&s)
			assert.Equal(t, tc.want != nil, ok)
			if tc.want != nil {
				assert.True(t, oid.Equal(tc.want))
			}
		})
	}
}
