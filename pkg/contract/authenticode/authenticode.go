// Package authenticode signs and verifies PE images (a boot loader, a
// unified kernel image) the way a UEFI firmware checks them under Secure
// Boot: an Authenticode signature, a PKCS#7 SignedData in the image's
// certificate table over the image's SHA-256 Authenticode hash. The build
// signs with it; a node checks with it, before it installs a slot, what
// its firmware would refuse to run.
//
// Only what this project writes is read: one signature, SHA-256, RSA
// PKCS#1 v1.5, the certificate table at the end of the file.
package authenticode

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"sort"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	"github.com/terrarium-os/terrarium/pkg/contract/cms"
)

// Errors of Sign and Verify; test for them with errors.Is.
var (
	// ErrMalformed: the image or its signature is not what this package
	// reads (not a PE32+ image, a broken table, a SignedData of another
	// form).
	ErrMalformed = errors.New("malformed PE image or signature")
	// ErrUnsigned: the image has no certificate table.
	ErrUnsigned = errors.New("the image is not signed")
	// ErrSigned: Sign was given an image that is signed already.
	ErrSigned = errors.New("the image is signed already")
	// ErrBadSignature: the signature does not match the image, or its
	// signer's key did not make it.
	ErrBadSignature = errors.New("the signature does not verify")
	// ErrNotTrusted: the signature is good but its signer is none of the
	// trusted certificates nor issued by one.
	ErrNotTrusted = errors.New("the signer is not trusted")
)

// Object identifiers: Authenticode's ("Windows Authenticode Portable
// Executable Signature Format"), PKCS#7's and PKCS#9's, as functions so
// that no package variable can be changed.
func oidSpcIndirectData() asn1.ObjectIdentifier {
	return asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 4}
}
func oidSpcPEImageData() asn1.ObjectIdentifier {
	return asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 15}
}
func oidSpcSpOpusInfo() asn1.ObjectIdentifier {
	return asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 1, 12}
}
func oidContentType() asn1.ObjectIdentifier { return asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3} }
func oidMessageDigest() asn1.ObjectIdentifier {
	return asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
}

// The WIN_CERTIFICATE the certificate table holds: revision 2.0, a PKCS#7
// SignedData.
const (
	winCertRevision   = 0x0200
	winCertTypePKCS7  = 0x0002
	winCertHeaderSize = 8
	// tableAlignment is the certificate table's alignment in the file.
	tableAlignment = 8
	// dirSecurity is the certificate table's index among the optional
	// header's data directories.
	dirSecurity = 4
)

// peLayout is where the fields Authenticode leaves out of its hash lie.
type peLayout struct {
	checksum      int // offset of the optional header's CheckSum
	certDir       int // offset of the certificate table's data directory
	sizeOfHeaders int
	sections      [][2]int // raw data (offset, size), in file order
	// certOff and certSize are the certificate table's place; zero when
	// the image is unsigned.
	certOff, certSize int
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// parse reads what the Authenticode hash needs of a PE32+ image.
func parse(b []byte) (*peLayout, error) {
	le := binary.LittleEndian
	if len(b) < 0x40 || string(b[:2]) != "MZ" {
		return nil, malformed("not a PE image (no MZ header)")
	}
	peOff := int(le.Uint32(b[0x3c:]))
	coff := peOff + 4
	opt := coff + 20
	if peOff < 0x40 || opt+112 > len(b) || string(b[peOff:peOff+4]) != "PE\x00\x00" {
		return nil, malformed("no PE header")
	}
	if le.Uint16(b[opt:]) != 0x20b {
		return nil, malformed("not PE32+")
	}
	optSize := int(le.Uint16(b[coff+16:]))
	dirs := int(le.Uint32(b[opt+108:]))
	if dirs <= dirSecurity || 112+8*dirSecurity+8 > optSize || opt+optSize > len(b) {
		return nil, malformed("no certificate table directory (%d data directories)", dirs)
	}
	l := &peLayout{checksum: opt + 64, certDir: opt + 112 + 8*dirSecurity, sizeOfHeaders: int(le.Uint32(b[opt+60:]))}
	l.certOff, l.certSize = int(le.Uint32(b[l.certDir:])), int(le.Uint32(b[l.certDir+4:]))
	secTable := opt + optSize
	n := int(le.Uint16(b[coff+2:]))
	if secTable+40*n > len(b) || l.sizeOfHeaders < secTable+40*n || l.sizeOfHeaders > len(b) {
		return nil, malformed("headers of %d bytes for %d sections", l.sizeOfHeaders, n)
	}
	end := len(b)
	if l.certOff != 0 || l.certSize != 0 {
		if l.certOff < l.sizeOfHeaders || l.certOff+l.certSize != len(b) || l.certSize < winCertHeaderSize {
			return nil, malformed("the certificate table at %#x+%#x is not at the end of the %d-byte file", l.certOff, l.certSize, len(b))
		}
		end = l.certOff
	}
	for i := range n {
		s := b[secTable+40*i:]
		size, off := int(le.Uint32(s[16:])), int(le.Uint32(s[20:]))
		if size == 0 {
			continue
		}
		if off < l.sizeOfHeaders || off+size > end || off+size < off {
			return nil, malformed("section %d's raw data at %#x+%#x is outside the image", i, off, size)
		}
		l.sections = append(l.sections, [2]int{off, size})
	}
	sort.Slice(l.sections, func(i, j int) bool { return l.sections[i][0] < l.sections[j][0] })
	for i := 1; i < len(l.sections); i++ {
		if l.sections[i-1][0]+l.sections[i-1][1] > l.sections[i][0] {
			return nil, malformed("sections' raw data overlap")
		}
	}
	return l, nil
}

// digest is the image's SHA-256 Authenticode hash: the headers without the
// checksum and the certificate directory, each section's raw data in file
// order, then what follows the last one up to the certificate table — what
// a UEFI firmware's loader hashes.
func (l *peLayout) digest(b []byte) []byte {
	end := len(b)
	if l.certSize != 0 {
		end = l.certOff
	}
	h := sha256.New()
	h.Write(b[:l.checksum])
	h.Write(b[l.checksum+4 : l.certDir])
	h.Write(b[l.certDir+8 : l.sizeOfHeaders])
	hashed := l.sizeOfHeaders
	for _, s := range l.sections {
		h.Write(b[s[0] : s[0]+s[1]])
		hashed += s[1]
	}
	if hashed < end {
		h.Write(b[hashed:end])
	}
	return h.Sum(nil)
}

// Digest returns the SHA-256 Authenticode hash of a PE32+ image, signed
// or not.
func Digest(b []byte) ([]byte, error) {
	l, err := parse(b)
	if err != nil {
		return nil, err
	}
	return l.digest(b), nil
}

// spcIndirectDataContent is the signed content: "a PE image" (with the
// obsolete file link every signer writes) and its digest.
func spcIndirectDataContent(digest []byte) ([]byte, error) {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1ObjectIdentifier(oidSpcPEImageData())
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
				// flags: none; file: [0] SpcLink, its file [2] an
				// SpcString, its unicode [0] a BMPString.
				b.AddASN1BitString(nil)
				b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
					b.AddASN1(cbasn1.Tag(2).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
						b.AddASN1(cbasn1.Tag(0).ContextSpecific(), func(b *cryptobyte.Builder) {
							for _, r := range "<<<Obsolete>>>" {
								b.AddUint16(uint16(r))
							}
						})
					})
				})
			})
		})
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // DigestInfo
			cms.AddAlgorithm(b, cms.OIDSHA256())
			b.AddASN1OctetString(digest)
		})
	})
	return b.Bytes()
}

// contentValue is a DER SEQUENCE's content octets: what the message
// digest attribute covers of the SpcIndirectDataContent.
func contentValue(seq []byte) ([]byte, error) {
	var inner cryptobyte.String
	s := cryptobyte.String(seq)
	if !s.ReadASN1(&inner, cbasn1.SEQUENCE) || !s.Empty() {
		return nil, malformed("the signed content is not one SEQUENCE")
	}
	return inner, nil
}

// attributes are the signer's authenticated attributes, each a DER
// Attribute, sorted as a DER SET OF is: the content type, an empty
// SpcSpOpusInfo and the message digest.
func attributes(messageDigest []byte) ([][]byte, error) {
	var out [][]byte
	for _, a := range []struct {
		oid   asn1.ObjectIdentifier
		value func(*cryptobyte.Builder)
	}{
		{oidContentType(), func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(oidSpcIndirectData()) }},
		{oidSpcSpOpusInfo(), func(b *cryptobyte.Builder) { b.AddASN1(cbasn1.SEQUENCE, func(*cryptobyte.Builder) {}) }},
		{oidMessageDigest(), func(b *cryptobyte.Builder) { b.AddASN1OctetString(messageDigest) }},
	} {
		var b cryptobyte.Builder
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1ObjectIdentifier(a.oid)
			b.AddASN1(cbasn1.SET, a.value)
		})
		enc, err := b.Bytes()
		if err != nil {
			return nil, err
		}
		out = append(out, enc)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out, nil
}

// Sign returns the unsigned PE32+ image b signed by key, whose
// certificate is cert: the image padded to 8 bytes, then a certificate
// table holding one WIN_CERTIFICATE with the SignedData, named by the
// optional header's certificate directory. The signature holds no time:
// the same key and image give the same bytes.
func Sign(b []byte, key *rsa.PrivateKey, cert *x509.Certificate) ([]byte, error) {
	img := bytes.Clone(b)
	if pad := len(img) % tableAlignment; pad != 0 {
		img = append(img, make([]byte, tableAlignment-pad)...)
	}
	l, err := parse(img)
	if err != nil {
		return nil, err
	}
	if l.certSize != 0 {
		return nil, ErrSigned
	}
	sd, err := signedData(l.digest(img), key, cert)
	if err != nil {
		return nil, err
	}
	certLen := winCertHeaderSize + len(sd)
	tableLen := (certLen + tableAlignment - 1) / tableAlignment * tableAlignment
	le := binary.LittleEndian
	le.PutUint32(img[l.certDir:], uint32(len(img)))
	le.PutUint32(img[l.certDir+4:], uint32(tableLen))
	img = le.AppendUint32(img, uint32(certLen))
	img = le.AppendUint16(img, winCertRevision)
	img = le.AppendUint16(img, winCertTypePKCS7)
	img = append(img, sd...)
	return append(img, make([]byte, tableLen-certLen)...), nil
}

// signedData is a ContentInfo holding a SignedData whose content is the
// SpcIndirectDataContent of digest, with the signer's certificate and its
// authenticated attributes.
func signedData(digest []byte, key *rsa.PrivateKey, cert *x509.Certificate) ([]byte, error) {
	content, err := spcIndirectDataContent(digest)
	if err != nil {
		return nil, err
	}
	value, err := contentValue(content)
	if err != nil {
		return nil, err
	}
	contentSum := sha256.Sum256(value)
	attrs, err := attributes(contentSum[:])
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(attributeSet(attrs))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(cms.OIDSignedData())
		b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1Int64(1)
				b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) { cms.AddAlgorithm(b, cms.OIDSHA256()) })
				b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
					b.AddASN1ObjectIdentifier(oidSpcIndirectData())
					b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes(content) })
				})
				b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes(cert.Raw) })
				b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
					b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
						b.AddASN1Int64(1)
						cms.AddIssuerAndSerial(b, cert.RawIssuer, cert.SerialNumber)
						cms.AddAlgorithm(b, cms.OIDSHA256())
						b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
							for _, a := range attrs {
								b.AddBytes(a)
							}
						})
						cms.AddAlgorithm(b, cms.OIDRSAEncryption())
						b.AddASN1OctetString(sig)
					})
				})
			})
		})
	})
	out, err := b.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encode the SignedData: %w", err)
	}
	return out, nil
}

// attributeSet is the DER SET OF the attributes: what the signature
// covers (the SignerInfo carries them as [0] IMPLICIT instead).
func attributeSet(attrs [][]byte) []byte {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
		for _, a := range attrs {
			b.AddBytes(a)
		}
	})
	return b.BytesOrPanic()
}

// signature is what Verify reads of a SignedData.
type signature struct {
	digest        []byte // the SpcIndirectDataContent's
	contentValue  []byte // its content octets
	certs         []*x509.Certificate
	issuer        []byte
	serial        *big.Int
	attrs         [][]byte // the authenticated attributes, as carried
	messageDigest []byte
	contentType   asn1.ObjectIdentifier
	sig           []byte
}

// Verify checks the image b's signature: one SignedData in the
// certificate table at the end of the file, over b's Authenticode hash,
// made by a certificate that is one of trusted or issued by one. It
// returns the signer's certificate.
func Verify(b []byte, trusted []*x509.Certificate) (*x509.Certificate, error) {
	l, err := parse(b)
	if err != nil {
		return nil, err
	}
	if l.certSize == 0 {
		return nil, ErrUnsigned
	}
	le := binary.LittleEndian
	table := b[l.certOff:]
	n := int(le.Uint32(table))
	if n < winCertHeaderSize || n > l.certSize || le.Uint16(table[4:]) != winCertRevision || le.Uint16(table[6:]) != winCertTypePKCS7 {
		return nil, malformed("the certificate table holds no PKCS#7 WIN_CERTIFICATE")
	}
	if rest := table[min((n+tableAlignment-1)/tableAlignment*tableAlignment, len(table)):]; len(rest) > 0 && !bytes.Equal(rest, make([]byte, len(rest))) {
		return nil, malformed("more than one signature (only one is read)")
	}
	s, err := parseSignedData(table[winCertHeaderSize:n])
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(s.digest, l.digest(b)) {
		return nil, fmt.Errorf("%w: the image's hash is not the signed one (the image was changed)", ErrBadSignature)
	}
	sum := sha256.Sum256(s.contentValue)
	if !bytes.Equal(s.messageDigest, sum[:]) || !s.contentType.Equal(oidSpcIndirectData()) {
		return nil, fmt.Errorf("%w: the signed attributes do not name the content", ErrBadSignature)
	}
	var signer *x509.Certificate
	for _, c := range s.certs {
		if bytes.Equal(c.RawIssuer, s.issuer) && c.SerialNumber.Cmp(s.serial) == 0 {
			signer = c
		}
	}
	if signer == nil {
		return nil, malformed("the signer's certificate is not in the signature")
	}
	pub, ok := signer.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: the signer %s has no RSA key", ErrBadSignature, signer.Subject)
	}
	attrSum := sha256.Sum256(attributeSet(s.attrs))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, attrSum[:], s.sig); err != nil {
		return nil, fmt.Errorf("%w: by %s: %w", ErrBadSignature, signer.Subject, err)
	}
	for _, t := range trusted {
		if bytes.Equal(t.Raw, signer.Raw) || signer.CheckSignatureFrom(t) == nil {
			return signer, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNotTrusted, signer.Subject)
}

// parseSignedData reads a ContentInfo holding a SignedData as Sign writes
// it (sbsign's read too): SHA-256, an SpcIndirectDataContent, one signer
// with authenticated attributes.
func parseSignedData(der []byte) (*signature, error) {
	in := cryptobyte.String(der)
	var ci, wrapped, sd cryptobyte.String
	var oid asn1.ObjectIdentifier
	if !in.ReadASN1(&ci, cbasn1.SEQUENCE) || !ci.ReadASN1ObjectIdentifier(&oid) || !oid.Equal(cms.OIDSignedData()) ||
		!ci.ReadASN1(&wrapped, cbasn1.Tag(0).Constructed().ContextSpecific()) || !wrapped.ReadASN1(&sd, cbasn1.SEQUENCE) {
		return nil, malformed("not a ContentInfo holding a SignedData")
	}
	var version int64
	var digestAlgs, content cryptobyte.String
	if !sd.ReadASN1Integer(&version) || !sd.ReadASN1(&digestAlgs, cbasn1.SET) || !sd.ReadASN1(&content, cbasn1.SEQUENCE) {
		return nil, malformed("SignedData's version, digest algorithms or content")
	}
	var ctype asn1.ObjectIdentifier
	var explicit, spc cryptobyte.String
	if !content.ReadASN1ObjectIdentifier(&ctype) || !ctype.Equal(oidSpcIndirectData()) ||
		!content.ReadASN1(&explicit, cbasn1.Tag(0).Constructed().ContextSpecific()) || !explicit.ReadASN1Element(&spc, cbasn1.SEQUENCE) {
		return nil, malformed("the content is not an SpcIndirectDataContent")
	}
	s := &signature{serial: new(big.Int)}
	var err error
	if s.contentValue, err = contentValue(spc); err != nil {
		return nil, err
	}
	if s.digest, err = spcDigest(s.contentValue); err != nil {
		return nil, err
	}
	var certs cryptobyte.String
	var hasCerts bool
	if !sd.ReadOptionalASN1(&certs, &hasCerts, cbasn1.Tag(0).Constructed().ContextSpecific()) {
		return nil, malformed("certificates")
	}
	for !certs.Empty() {
		var c cryptobyte.String
		if !certs.ReadASN1Element(&c, cbasn1.SEQUENCE) {
			return nil, malformed("a certificate is not a SEQUENCE")
		}
		cert, err := x509.ParseCertificate(c)
		if err != nil {
			return nil, malformed("a certificate: %v", err)
		}
		s.certs = append(s.certs, cert)
	}
	if sd.PeekASN1Tag(cbasn1.Tag(1).Constructed().ContextSpecific()) {
		return nil, malformed("CRLs are not read")
	}
	var signers, si cryptobyte.String
	if !sd.ReadASN1(&signers, cbasn1.SET) || !signers.ReadASN1(&si, cbasn1.SEQUENCE) || !signers.Empty() {
		return nil, malformed("not exactly one signer")
	}
	return s, s.parseSigner(si)
}

// spcDigest reads an SpcIndirectDataContent's SHA-256 digest from its
// content octets.
func spcDigest(value []byte) ([]byte, error) {
	v := cryptobyte.String(value)
	var data, digestInfo, digest cryptobyte.String
	if !v.ReadASN1(&data, cbasn1.SEQUENCE) || !v.ReadASN1(&digestInfo, cbasn1.SEQUENCE) {
		return nil, malformed("SpcIndirectDataContent")
	}
	var typ asn1.ObjectIdentifier
	if !data.ReadASN1ObjectIdentifier(&typ) || !typ.Equal(oidSpcPEImageData()) {
		return nil, malformed("the signed content is not a PE image's")
	}
	if alg, ok := cms.ReadAlgorithm(&digestInfo); !ok || !alg.Equal(cms.OIDSHA256()) ||
		!digestInfo.ReadASN1(&digest, cbasn1.OCTET_STRING) || len(digest) != sha256.Size {
		return nil, malformed("the image's digest is not SHA-256")
	}
	return digest, nil
}

// parseSigner reads the one SignerInfo: issuer and serial, SHA-256, the
// authenticated attributes, RSA, the signature.
func (s *signature) parseSigner(si cryptobyte.String) error {
	var version int64
	var ias, issuer cryptobyte.String
	if !si.ReadASN1Integer(&version) || !si.ReadASN1(&ias, cbasn1.SEQUENCE) ||
		!ias.ReadASN1Element(&issuer, cbasn1.SEQUENCE) || !ias.ReadASN1Integer(s.serial) {
		return malformed("SignerInfo's version or issuer and serial number")
	}
	s.issuer = issuer
	if alg, ok := cms.ReadAlgorithm(&si); !ok || !alg.Equal(cms.OIDSHA256()) {
		return malformed("the signer's digest is not SHA-256")
	}
	var attrs cryptobyte.String
	if !si.ReadASN1(&attrs, cbasn1.Tag(0).Constructed().ContextSpecific()) {
		return malformed("no authenticated attributes")
	}
	for !attrs.Empty() {
		var a, body, values cryptobyte.String
		if !attrs.ReadASN1Element(&a, cbasn1.SEQUENCE) {
			return malformed("an attribute")
		}
		s.attrs = append(s.attrs, a)
		var oid asn1.ObjectIdentifier
		if !a.ReadASN1(&body, cbasn1.SEQUENCE) || !body.ReadASN1ObjectIdentifier(&oid) || !body.ReadASN1(&values, cbasn1.SET) {
			return malformed("an attribute")
		}
		switch {
		case oid.Equal(oidMessageDigest()):
			var d cryptobyte.String
			if !values.ReadASN1(&d, cbasn1.OCTET_STRING) {
				return malformed("the message digest attribute")
			}
			s.messageDigest = d
		case oid.Equal(oidContentType()):
			if !values.ReadASN1ObjectIdentifier(&s.contentType) {
				return malformed("the content type attribute")
			}
		}
	}
	if alg, ok := cms.ReadAlgorithm(&si); !ok || !(alg.Equal(cms.OIDRSAEncryption()) || alg.Equal(cms.OIDSHA256WithRSA())) {
		return malformed("the signature is not RSA")
	}
	var sig cryptobyte.String
	if !si.ReadASN1(&sig, cbasn1.OCTET_STRING) {
		return malformed("the signature")
	}
	s.sig = sig
	return nil
}
