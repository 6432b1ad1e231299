package secureboot

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"math/big"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"

	"github.com/terrarium-os/terrarium/pkg/contract/cms"
)

// signedData is the part of a PKCS#7 SignedData that an authenticated
// variable's signature needs: one signer, no authenticated attributes.
type signedData struct {
	certs     [][]byte // DER certificates carried along
	issuer    []byte   // the signer's issuer, DER Name
	serial    *big.Int // the signer's serial number
	signature []byte   // RSA PKCS#1 v1.5 over SHA-256 of the content
}

// signPKCS7 signs content (detached) with k as a UEFI authenticated
// variable's CertData: a DER SignedData without the ContentInfo around it,
// SHA-256 and RSA, no authenticated attributes, the signer's certificate
// included — what efitools' sign-efi-sig-list writes. RSA PKCS#1 v1.5 is
// deterministic, so the same key, content and certificate give the same
// bytes as efitools.
func signPKCS7(content []byte, k *Key) ([]byte, error) {
	sum := sha256.Sum256(content)
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.Private, crypto.SHA256, sum[:])
	if err != nil {
		return nil, fmt.Errorf("sign with the %s key: %w", k.Role, err)
	}
	return signedData{certs: [][]byte{k.Cert.Raw}, issuer: k.Cert.RawIssuer, serial: k.Cert.SerialNumber, signature: sig}.marshal()
}

func (sd signedData) marshal() ([]byte, error) {
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1Int64(1)
		b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) { cms.AddAlgorithm(b, cms.OIDSHA256()) })
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(cms.OIDData()) })
		if len(sd.certs) > 0 {
			b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
				for _, c := range sd.certs {
					b.AddBytes(c)
				}
			})
		}
		b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1Int64(1)
				cms.AddIssuerAndSerial(b, sd.issuer, sd.serial)
				cms.AddAlgorithm(b, cms.OIDSHA256())
				cms.AddAlgorithm(b, cms.OIDRSAEncryption())
				b.AddASN1OctetString(sd.signature)
			})
		})
	})
	out, err := b.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encode PKCS#7 SignedData: %w", err)
	}
	return out, nil
}

// parsePKCS7 reads a SignedData as signPKCS7 writes it, bare or inside a
// ContentInfo (both occur in .auth files; firmware takes both): version 1,
// SHA-256, detached data content, one signer without attributes. Errors
// wrap ErrMalformed.
func parsePKCS7(der []byte) (*signedData, error) {
	bad := func(what string) (*signedData, error) {
		return nil, fmt.Errorf("PKCS#7 SignedData: %w: %s", ErrMalformed, what)
	}
	in := cryptobyte.String(der)
	var sd cryptobyte.String
	if !in.ReadASN1(&sd, cbasn1.SEQUENCE) || !in.Empty() {
		return bad("not one DER SEQUENCE")
	}
	if peek := sd; peek.PeekASN1Tag(cbasn1.OBJECT_IDENTIFIER) {
		// A ContentInfo: signedData, [0] EXPLICIT SignedData.
		var oid asn1.ObjectIdentifier
		var wrapped cryptobyte.String
		if !sd.ReadASN1ObjectIdentifier(&oid) || !oid.Equal(cms.OIDSignedData()) ||
			!sd.ReadASN1(&wrapped, cbasn1.Tag(0).Constructed().ContextSpecific()) || !sd.Empty() ||
			!wrapped.ReadASN1(&sd, cbasn1.SEQUENCE) || !wrapped.Empty() {
			return bad("a ContentInfo that is not signedData")
		}
	}
	var version int64
	if !sd.ReadASN1Integer(&version) || version != 1 {
		return bad("version is not 1")
	}
	var digests cryptobyte.String
	if !sd.ReadASN1(&digests, cbasn1.SET) {
		return bad("no digestAlgorithms")
	}
	if oid, ok := cms.ReadAlgorithm(&digests); !ok || !oid.Equal(cms.OIDSHA256()) || !digests.Empty() {
		return bad("digestAlgorithms is not SHA-256 alone")
	}
	var ci cryptobyte.String
	var ctype asn1.ObjectIdentifier
	if !sd.ReadASN1(&ci, cbasn1.SEQUENCE) || !ci.ReadASN1ObjectIdentifier(&ctype) || !ctype.Equal(cms.OIDData()) || !ci.Empty() {
		return bad("contentInfo is not detached data")
	}
	out := &signedData{}
	var certs cryptobyte.String
	var hasCerts bool
	if !sd.ReadOptionalASN1(&certs, &hasCerts, cbasn1.Tag(0).Constructed().ContextSpecific()) {
		return bad("certificates")
	}
	for !certs.Empty() {
		var c cryptobyte.String
		if !certs.ReadASN1Element(&c, cbasn1.SEQUENCE) {
			return bad("a certificate is not a SEQUENCE")
		}
		out.certs = append(out.certs, append([]byte(nil), c...))
	}
	if sd.PeekASN1Tag(cbasn1.Tag(1).Constructed().ContextSpecific()) {
		return bad("CRLs are not supported")
	}
	var signers, si cryptobyte.String
	if !sd.ReadASN1(&signers, cbasn1.SET) || !sd.Empty() {
		return bad("signerInfos")
	}
	if !signers.ReadASN1(&si, cbasn1.SEQUENCE) || !signers.Empty() {
		return bad("not exactly one signer")
	}
	if err := out.parseSigner(si); err != nil {
		return nil, err
	}
	return out, nil
}

// parseSigner reads the one SignerInfo: version 1, issuer and serial,
// SHA-256, no authenticated attributes, RSA, the signature.
func (sd *signedData) parseSigner(si cryptobyte.String) error {
	bad := func(what string) error {
		return fmt.Errorf("PKCS#7 SignerInfo: %w: %s", ErrMalformed, what)
	}
	var version int64
	var ias, issuer cryptobyte.String
	sd.serial = new(big.Int)
	if !si.ReadASN1Integer(&version) || version != 1 ||
		!si.ReadASN1(&ias, cbasn1.SEQUENCE) || !ias.ReadASN1Element(&issuer, cbasn1.SEQUENCE) ||
		!ias.ReadASN1Integer(sd.serial) || !ias.Empty() {
		return bad("version or issuerAndSerialNumber")
	}
	sd.issuer = append([]byte(nil), issuer...)
	if oid, ok := cms.ReadAlgorithm(&si); !ok || !oid.Equal(cms.OIDSHA256()) {
		return bad("digest is not SHA-256")
	}
	if si.PeekASN1Tag(cbasn1.Tag(0).Constructed().ContextSpecific()) {
		return bad("authenticated attributes are not supported")
	}
	if oid, ok := cms.ReadAlgorithm(&si); !ok || !(oid.Equal(cms.OIDRSAEncryption()) || oid.Equal(cms.OIDSHA256WithRSA())) {
		return bad("signature is not RSA")
	}
	var sig cryptobyte.String
	if !si.ReadASN1(&sig, cbasn1.OCTET_STRING) || !si.Empty() {
		return bad("signature, or more after it")
	}
	sd.signature = append([]byte(nil), sig...)
	return nil
}

// verify checks that cert made sd's signature over content.
func (sd *signedData) verify(content []byte, cert *x509.Certificate) error {
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return fmt.Errorf("%w: %s has no RSA key", ErrBadSignature, cert.Subject)
	}
	if string(sd.issuer) != string(cert.RawIssuer) || sd.serial.Cmp(cert.SerialNumber) != 0 {
		return fmt.Errorf("%w: signed by another certificate than %s", ErrBadSignature, cert.Subject)
	}
	sum := sha256.Sum256(content)
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sd.signature); err != nil {
		return fmt.Errorf("%w: by %s: %w", ErrBadSignature, cert.Subject, err)
	}
	return nil
}
