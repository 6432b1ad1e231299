package secureboot

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSignatureListsRoundTrip(t *testing.T) {
	ks := newTestKeySet(t)
	owner, err := ParseGUID(testOwnerStr)
	require.NoError(t, err)
	sha256Type, err := ParseGUID("c1c41626-504c-4092-aca9-41f936934328") // EFI_CERT_SHA256_GUID
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		lists []SignatureList
	}{
		{"one certificate", []SignatureList{X509SignatureList(owner, ks.PK.Cert)}},
		{"certificates of two owners", []SignatureList{X509SignatureList(owner, ks.DB.Cert), X509SignatureList(ks.Owner, ks.KEK.Cert)}},
		{"hashes with a header", []SignatureList{{Type: sha256Type, Header: []byte{1, 2, 3}, Signatures: []SignatureData{
			{Owner: owner, Data: bytes.Repeat([]byte{0xaa}, 32)}, {Owner: ks.Owner, Data: bytes.Repeat([]byte{0xbb}, 32)},
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
	ks := newTestKeySet(t)
	good, err := X509SignatureList(ks.Owner, ks.PK.Cert).MarshalBinary()
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
	assert.Equal(t, ks.PK.Cert.Raw, certs[1].Raw)
	lists[0].Signatures[0].Data = []byte("not a certificate")
	_, err = Certificates(lists)
	assert.ErrorIs(t, err, ErrMalformed)
}

// Our .esl is efitools' cert-to-efi-sig-list's, byte for byte, and
// sig-list-to-certs reads the certificate back out of it.
func TestSignatureListMatchesEfitools(t *testing.T) {
	ks := newTestKeySet(t)
	dir := t.TempDir()
	for _, r := range Roles() {
		t.Run(string(r), func(t *testing.T) {
			k := ks.Key(r)
			ours, err := X509SignatureList(ks.Owner, k.Cert).MarshalBinary()
			require.NoError(t, err)
			theirs := filepath.Join(dir, string(r)+".efitools.esl")
			runTool(t, nil, "cert-to-efi-sig-list", "-g", ks.Owner.String(), k.CertFile, theirs)
			want, err := os.ReadFile(theirs)
			require.NoError(t, err)
			assert.Equal(t, want, ours)

			esl := writeFile(t, dir, ESLFile(r), ours)
			prefix := filepath.Join(dir, string(r)+"-out")
			runTool(t, nil, "sig-list-to-certs", esl, prefix)
			der, err := os.ReadFile(prefix + "-0.der")
			require.NoError(t, err)
			assert.Equal(t, k.Cert.Raw, der)
		})
	}
}
