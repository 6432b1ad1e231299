package efisig

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newCert is a self-signed certificate named name (a signature list
// carries its DER bytes only).
func newCert(t testing.TB, name string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Unix(1767225600, 0), NotAfter: time.Unix(1767225600, 0).Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

func TestSignatureListsRoundTrip(t *testing.T) {
	certA, certB, certC := newCert(t, "A"), newCert(t, "B"), newCert(t, "C")
	ownerB, err := NewGUID()
	require.NoError(t, err)
	owner, err := ParseGUID("a8f1e0c2-5b3d-4e6f-9a7b-1c2d3e4f5a6b")
	require.NoError(t, err)
	sha256Type, err := ParseGUID("c1c41626-504c-4092-aca9-41f936934328") // EFI_CERT_SHA256_GUID
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		lists []SignatureList
	}{
		{"one certificate", []SignatureList{X509SignatureList(owner, certA)}},
		{"certificates of two owners", []SignatureList{X509SignatureList(owner, certB), X509SignatureList(ownerB, certC)}},
		{"hashes with a header", []SignatureList{{Type: sha256Type, Header: []byte{1, 2, 3}, Signatures: []SignatureData{
			{Owner: owner, Data: bytes.Repeat([]byte{0xaa}, 32)}, {Owner: ownerB, Data: bytes.Repeat([]byte{0xbb}, 32)},
		}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := MarshalSignatureLists(tc.lists...)
			require.NoError(t, err)
			got, err := ParseSignatureLists(b)
			require.NoError(t, err)
			assert.Equal(t, tc.lists, got)
			again, err := MarshalSignatureLists(got...)
			require.NoError(t, err)
			assert.Equal(t, b, again)
		})
	}
}

func TestSignatureListsMalformed(t *testing.T) {
	certA, ownerB := newCert(t, "A"), GUID{1, 2, 3}
	good, err := X509SignatureList(ownerB, certA).MarshalBinary()
	require.NoError(t, err)
	with := func(off int, v uint32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"short header", good[:20]},
		{"size past the end", good[:len(good)-1]},
		{"trailing bytes", append(bytes.Clone(good), 0)},
		{"signature smaller than its owner", with(24, 15)},
		{"signature size not dividing", with(24, uint32(len(good)-28-1))},
		{"header larger than the list", with(20, uint32(len(good)))},
		{"no signatures", with(16, 28)},
		{"size zero", with(16, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSignatureLists(tc.data)
			assert.ErrorIs(t, err, ErrMalformed)
		})
	}
	_, err = MarshalSignatureLists(SignatureList{Type: EFICertX509()})
	assert.ErrorIs(t, err, ErrMalformed, "no signatures")
	_, err = SignatureList{Signatures: []SignatureData{{Data: []byte{1}}, {Data: []byte{1, 2}}}}.MarshalBinary()
	assert.ErrorIs(t, err, ErrMalformed, "signatures of two sizes")

	lists, err := ParseSignatureLists(append(bytes.Clone(good), good...))
	require.NoError(t, err)
	certs, err := Certificates(lists)
	require.NoError(t, err)
	require.Len(t, certs, 2)
	assert.Equal(t, certA.Raw, certs[1].Raw)
	lists[0].Signatures[0].Data = []byte("not a certificate")
	_, err = Certificates(lists)
	assert.ErrorIs(t, err, ErrMalformed)
}

func TestGUID(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  GUID
		want string
	}{
		{"EFI_GLOBAL_VARIABLE", EFIGlobalVariable(), "8be4df61-93ca-11d2-aa0d-00e098032b8c"},
		{"EFI_IMAGE_SECURITY_DATABASE_GUID", EFIImageSecurityDatabase(), "d719b2cb-3d3a-4596-a3bc-dad00e67656f"},
		{"EFI_CERT_X509_GUID", EFICertX509(), "a5c059a1-94e4-4aa7-87b5-ab155c2bf072"},
		{"EFI_CERT_TYPE_PKCS7_GUID", EFICertTypePKCS7(), "4aafd29d-68df-49ee-8aa9-347d375665a7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.got.String())
			g, err := ParseGUID(tc.want)
			require.NoError(t, err)
			assert.Equal(t, tc.got, g)
		})
	}
	for _, bad := range []string{"", "8be4df61", "{8be4df61-93ca-11d2-aa0d-00e098032b8c}", "urn:uuid:8be4df61-93ca-11d2-aa0d-00e098032b8c", "8be4df6193ca11d2aa0d00e098032b8c"} {
		_, err := ParseGUID(bad)
		assert.Error(t, err, bad)
	}
}
