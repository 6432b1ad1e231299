// Package cms holds what Terrarium's PKCS#7 (CMS) SignedData writers and
// readers share: the object identifiers of SHA-256 with RSA and of the
// content types, and AlgorithmIdentifier written and read with
// golang.org/x/crypto/cryptobyte. The UEFI authenticated variables of
// pkg/image/secureboot and the Authenticode signatures of
// pkg/contract/authenticode are both such SignedData.
package cms

import (
	"encoding/asn1"
	"math/big"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// Object identifiers (RFC 2315, RFC 8017, NIST), as functions so that no
// package variable can be changed.

// OIDData is PKCS#7's data content type.
func OIDData() asn1.ObjectIdentifier { return asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1} }

// OIDSignedData is PKCS#7's signedData content type.
func OIDSignedData() asn1.ObjectIdentifier { return asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2} }

// OIDSHA256 is the SHA-256 digest algorithm.
func OIDSHA256() asn1.ObjectIdentifier { return asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1} }

// OIDRSAEncryption is rsaEncryption, the signature algorithm PKCS#7
// signers name.
func OIDRSAEncryption() asn1.ObjectIdentifier {
	return asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
}

// OIDSHA256WithRSA is sha256WithRSAEncryption, which some signers name
// instead.
func OIDSHA256WithRSA() asn1.ObjectIdentifier {
	return asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
}

// AddAlgorithm writes an AlgorithmIdentifier of oid with NULL
// parameters.
func AddAlgorithm(b *cryptobyte.Builder, oid asn1.ObjectIdentifier) {
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oid)
		b.AddASN1NULL()
	})
}

// AddIssuerAndSerial writes a SignerInfo's IssuerAndSerialNumber: the
// signer certificate's DER issuer name and its serial number.
func AddIssuerAndSerial(b *cryptobyte.Builder, issuer []byte, serial *big.Int) {
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(issuer)
		b.AddASN1BigInt(serial)
	})
}

// ReadAlgorithm reads an AlgorithmIdentifier whose parameters are absent
// or NULL, and reports whether it could.
func ReadAlgorithm(s *cryptobyte.String) (asn1.ObjectIdentifier, bool) {
	var alg cryptobyte.String
	var oid asn1.ObjectIdentifier
	if !s.ReadASN1(&alg, cbasn1.SEQUENCE) || !alg.ReadASN1ObjectIdentifier(&oid) {
		return nil, false
	}
	if !alg.Empty() {
		var null cryptobyte.String
		if !alg.ReadASN1(&null, cbasn1.NULL) || !null.Empty() || !alg.Empty() {
			return nil, false
		}
	}
	return oid, true
}
