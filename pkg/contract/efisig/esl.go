package efisig

import (
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed means a signature list does not parse, or does not
// encode.
var ErrMalformed = errors.New("malformed signature list")

// SignatureList is one EFI_SIGNATURE_LIST: signatures of one type, each
// of the same size, with the GUID of their owner. The content of PK, KEK
// and db is a sequence of such lists.
type SignatureList struct {
	Type       GUID // EFICertX509() for certificates
	Header     []byte
	Signatures []SignatureData
}

// SignatureData is one EFI_SIGNATURE_DATA.
type SignatureData struct {
	Owner GUID
	Data  []byte // for EFICertX509, a DER certificate
}

// signatureListHeaderSize is EFI_SIGNATURE_LIST without its signatures:
// SignatureType, SignatureListSize, SignatureHeaderSize, SignatureSize.
const signatureListHeaderSize = 16 + 4 + 4 + 4

// X509SignatureList is the list of one certificate, as efitools'
// cert-to-efi-sig-list writes it: an X.509 certificate has a size of its
// own, so each is a list of its own.
func X509SignatureList(owner GUID, cert *x509.Certificate) SignatureList {
	return SignatureList{Type: EFICertX509(), Signatures: []SignatureData{{Owner: owner, Data: cert.Raw}}}
}

// MarshalBinary encodes the list. All its signatures must be of one size,
// and there must be at least one.
func (l SignatureList) MarshalBinary() ([]byte, error) {
	if len(l.Signatures) == 0 {
		return nil, fmt.Errorf("encode signature list: %w: no signatures", ErrMalformed)
	}
	sigSize := 16 + len(l.Signatures[0].Data)
	size := signatureListHeaderSize + len(l.Header) + len(l.Signatures)*sigSize
	if size > math.MaxUint32 {
		return nil, fmt.Errorf("encode signature list: %w: %d bytes", ErrMalformed, size)
	}
	b := make([]byte, 0, size)
	b = append(b, l.Type[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Header)))
	b = binary.LittleEndian.AppendUint32(b, uint32(sigSize))
	b = append(b, l.Header...)
	for i, s := range l.Signatures {
		if 16+len(s.Data) != sigSize {
			return nil, fmt.Errorf("encode signature list: %w: signature %d has %d bytes, the first %d", ErrMalformed, i, len(s.Data), sigSize-16)
		}
		b = append(b, s.Owner[:]...)
		b = append(b, s.Data...)
	}
	return b, nil
}

// MarshalSignatureLists encodes lists one after another: a variable's
// content, an .esl file.
func MarshalSignatureLists(lists ...SignatureList) ([]byte, error) {
	var out []byte
	for i, l := range lists {
		b, err := l.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("list %d: %w", i, err)
		}
		out = append(out, b...)
	}
	return out, nil
}

// ParseSignatureLists reads a sequence of EFI_SIGNATURE_LISTs (an .esl
// file, a variable's content) as a firmware does: each list's sizes must
// add up exactly, every signature must be at least its owner GUID, and a
// list must hold a signature. Errors wrap ErrMalformed. What it accepts,
// MarshalSignatureLists writes back byte for byte.
func ParseSignatureLists(b []byte) ([]SignatureList, error) {
	var lists []SignatureList
	for off := 0; off < len(b); {
		rest := b[off:]
		if len(rest) < signatureListHeaderSize {
			return nil, fmt.Errorf("signature list at byte %d: %w: %d bytes left, a list header has %d", off, ErrMalformed, len(rest), signatureListHeaderSize)
		}
		var l SignatureList
		copy(l.Type[:], rest)
		listSize := uint64(binary.LittleEndian.Uint32(rest[16:]))
		headerSize := uint64(binary.LittleEndian.Uint32(rest[20:]))
		sigSize := uint64(binary.LittleEndian.Uint32(rest[24:]))
		switch {
		case listSize > uint64(len(rest)):
			return nil, fmt.Errorf("signature list at byte %d: %w: its size %d runs past the end (%d bytes left)", off, ErrMalformed, listSize, len(rest))
		case sigSize < 16:
			return nil, fmt.Errorf("signature list at byte %d: %w: signature size %d, less than its owner GUID", off, ErrMalformed, sigSize)
		case signatureListHeaderSize+headerSize > listSize:
			return nil, fmt.Errorf("signature list at byte %d: %w: header size %d does not fit its size %d", off, ErrMalformed, headerSize, listSize)
		}
		body := listSize - signatureListHeaderSize - headerSize
		if body == 0 || body%sigSize != 0 {
			return nil, fmt.Errorf("signature list at byte %d: %w: %d bytes of signatures are not a whole number of %d-byte signatures", off, ErrMalformed, body, sigSize)
		}
		hdrEnd := signatureListHeaderSize + headerSize
		if headerSize > 0 {
			l.Header = append([]byte(nil), rest[signatureListHeaderSize:hdrEnd]...)
		}
		for p := hdrEnd; p < listSize; p += sigSize {
			var s SignatureData
			copy(s.Owner[:], rest[p:])
			s.Data = append([]byte{}, rest[p+16:p+sigSize]...)
			l.Signatures = append(l.Signatures, s)
		}
		lists = append(lists, l)
		off += int(listSize)
	}
	return lists, nil
}

// Certificates returns the certificates of the X.509 lists among lists,
// in order; other types are passed over. A signature that is not a
// certificate is an error wrapping ErrMalformed.
func Certificates(lists []SignatureList) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for i, l := range lists {
		if l.Type != EFICertX509() {
			continue
		}
		for j, s := range l.Signatures {
			c, err := x509.ParseCertificate(s.Data)
			if err != nil {
				return nil, fmt.Errorf("signature list %d, signature %d: %w: %w", i, j, ErrMalformed, err)
			}
			certs = append(certs, c)
		}
	}
	return certs, nil
}
