package authenticode

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostSDBoot is the build host's systemd-boot (make deps installs
// systemd-boot-efi): a real PE32+ image.
const hostSDBoot = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"

// testPE is a minimal PE32+ x86-64 image: headers, then two sections of
// 0x200 bytes each (distinct content), 16 data directories, nothing
// signed.
func testPE() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0x600)
	copy(b, "MZ")
	le.PutUint32(b[0x3c:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	coff := 0x44
	le.PutUint16(b[coff:], 0x8664)
	le.PutUint16(b[coff+2:], 2)
	le.PutUint16(b[coff+16:], 240)
	le.PutUint16(b[coff+18:], 0x22)
	opt := coff + 20
	le.PutUint16(b[opt:], 0x20b)
	le.PutUint32(b[opt+16:], 0x1000)      // entry point
	le.PutUint64(b[opt+24:], 0x140000000) // image base
	le.PutUint32(b[opt+32:], 0x1000)      // section alignment
	le.PutUint32(b[opt+36:], 0x200)       // file alignment
	le.PutUint32(b[opt+56:], 0x3000)      // size of image
	le.PutUint32(b[opt+60:], 0x200)       // size of headers
	le.PutUint16(b[opt+68:], 10)          // EFI application
	le.PutUint32(b[opt+108:], 16)         // data directories
	sec := opt + 240
	for i, name := range []string{".text", ".data"} {
		s := b[sec+40*i:]
		copy(s, name)
		le.PutUint32(s[8:], 0x200)
		le.PutUint32(s[12:], uint32(0x1000*(i+1)))
		le.PutUint32(s[16:], 0x200)
		le.PutUint32(s[20:], uint32(0x200*(i+1)))
		copy(b[0x200*(i+1):], bytes.Repeat([]byte(name), 0x200/len(name)))
	}
	return b
}

type signer struct {
	key  *rsa.PrivateKey
	cert *x509.Certificate
}

// newSigner makes an RSA-2048 key and a certificate for it, issued by
// parent (self-signed when nil).
func newSigner(t testing.TB, name string, parent *signer) *signer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: parent == nil, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	issuer, issuerKey := tmpl, key
	if parent != nil {
		issuer, issuerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, issuerKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &signer{key: key, cert: cert}
}

func TestSignVerify(t *testing.T) {
	db := newSigner(t, "db", nil)
	other := newSigner(t, "other db", nil)
	img := testPE()
	signed, err := Sign(img, db.key, db.cert)
	require.NoError(t, err)
	assert.Equal(t, img[0x200:], signed[0x200:len(img)], "the sections are kept as they were")
	assert.Zero(t, len(signed)%8)

	got, err := Verify(signed, []*x509.Certificate{other.cert, db.cert})
	require.NoError(t, err)
	assert.True(t, got.Equal(db.cert))

	again, err := Sign(img, db.key, db.cert)
	require.NoError(t, err)
	assert.Equal(t, signed, again, "the same key and image give the same bytes")

	_, err = Verify(signed, []*x509.Certificate{other.cert})
	assert.ErrorIs(t, err, ErrNotTrusted)
	_, err = Verify(img, []*x509.Certificate{db.cert})
	assert.ErrorIs(t, err, ErrUnsigned)
	_, err = Sign(signed, db.key, db.cert)
	assert.ErrorIs(t, err, ErrSigned)

	d1, err := Digest(img)
	require.NoError(t, err)
	d2, err := Digest(signed)
	require.NoError(t, err)
	assert.Equal(t, d1, d2, "signing does not change what is hashed")

	// The checksum is not hashed: a tool that fixes it up keeps the
	// signature good.
	fixed := bytes.Clone(signed)
	fixed[0x58+64] ^= 0xff
	_, err = Verify(fixed, []*x509.Certificate{db.cert})
	assert.NoError(t, err, "the checksum is outside the hash")

	for _, tc := range []struct {
		name string
		off  int
	}{
		{"the DOS header", 0x10},
		{"the entry point", 0x58 + 16},
		{"the section table", 0x58 + 240 + 8},
		{"the first section", 0x210},
		{"the second section", 0x5ff},
		{"the signature's last byte", len(img) + winCertHeaderSize + signedDataLen(t, signed, len(img)) - 1},
	} {
		t.Run("altered "+tc.name, func(t *testing.T) {
			b := bytes.Clone(signed)
			b[tc.off] ^= 0x01
			_, err := Verify(b, []*x509.Certificate{db.cert})
			assert.Error(t, err)
			assert.NotErrorIs(t, err, ErrNotTrusted, "an altered image is refused for what it is")
		})
	}
}

// signedDataLen is the SignedData's length in the WIN_CERTIFICATE at at.
func signedDataLen(t *testing.T, signed []byte, at int) int {
	t.Helper()
	return int(binary.LittleEndian.Uint32(signed[at:])) - winCertHeaderSize
}

// TestVerifyIssuedSigner: db may hold a CA; an image signed by a key it
// issued is trusted, one signed by a key another CA issued is not.
func TestVerifyIssuedSigner(t *testing.T) {
	ca := newSigner(t, "site CA", nil)
	leaf := newSigner(t, "site signer", ca)
	stranger := newSigner(t, "stranger", newSigner(t, "other CA", nil))
	signed, err := Sign(testPE(), leaf.key, leaf.cert)
	require.NoError(t, err)
	got, err := Verify(signed, []*x509.Certificate{ca.cert})
	require.NoError(t, err)
	assert.True(t, got.Equal(leaf.cert))
	foreign, err := Sign(testPE(), stranger.key, stranger.cert)
	require.NoError(t, err)
	_, err = Verify(foreign, []*x509.Certificate{ca.cert})
	assert.ErrorIs(t, err, ErrNotTrusted)
}

// TestAgainstSbsigntool holds the package to another implementation:
// Debian's sbverify accepts what Sign writes, and Verify accepts what
// sbsign writes (with its signing time and its own attributes), both on
// the host's systemd-boot.
func TestAgainstSbsigntool(t *testing.T) {
	for _, tool := range []string{"sbsign", "sbverify"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "%s: run make deps (sbsigntool)", tool)
	}
	sdboot, err := os.ReadFile(hostSDBoot)
	require.NoError(t, err, "systemd-boot: run make deps (systemd-boot-efi)")
	db := newSigner(t, "db", nil)
	dir := t.TempDir()
	keyFile, certFile := filepath.Join(dir, "db.key"), filepath.Join(dir, "db.crt")
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(db.key)}), 0o600))
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: db.cert.Raw}), 0o644))

	ours, err := Sign(sdboot, db.key, db.cert)
	require.NoError(t, err)
	oursFile := filepath.Join(dir, "ours.efi")
	require.NoError(t, os.WriteFile(oursFile, ours, 0o644))
	out, err := exec.Command("sbverify", "--cert", certFile, oursFile).CombinedOutput()
	require.NoError(t, err, "sbverify refuses our signature: %s", out)

	theirsFile := filepath.Join(dir, "theirs.efi")
	out, err = exec.Command("sbsign", "--key", keyFile, "--cert", certFile, "--output", theirsFile, hostSDBoot).CombinedOutput()
	require.NoError(t, err, "sbsign: %s", out)
	theirs, err := os.ReadFile(theirsFile)
	require.NoError(t, err)
	got, err := Verify(theirs, []*x509.Certificate{db.cert})
	require.NoError(t, err, "Verify refuses sbsign's signature")
	assert.True(t, got.Equal(db.cert))
	d1, err := Digest(ours)
	require.NoError(t, err)
	d2, err := Digest(theirs)
	require.NoError(t, err)
	assert.Equal(t, d1, d2, "sbsign and Sign hash the same image the same way")
}

func TestParseRefuses(t *testing.T) {
	truncated := testPE()[:0x90]
	pe32 := testPE()
	binary.LittleEndian.PutUint16(pe32[0x58:], 0x10b)
	farSection := testPE()
	binary.LittleEndian.PutUint32(farSection[0x58+240+20:], 0x10000)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "no MZ header"},
		{"text", bytes.Repeat([]byte("not a PE image "), 20), "no MZ header"},
		{"truncated", truncated, "no PE header"},
		{"PE32", pe32, "not PE32+"},
		{"a section outside the file", farSection, "outside the image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Digest(tc.b)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
