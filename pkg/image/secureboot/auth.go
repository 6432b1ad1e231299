package secureboot

import (
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unicode/utf16"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// EFI variable attributes (UEFI 2.10, 8.2).
const (
	AttrNonVolatile                       uint32 = 0x01
	AttrBootServiceAccess                 uint32 = 0x02
	AttrRuntimeAccess                     uint32 = 0x04
	AttrTimeBasedAuthenticatedWriteAccess uint32 = 0x20
	AttrAppendWrite                       uint32 = 0x40
)

// secureBootAttrs are the attributes of PK, KEK, db and dbx.
const secureBootAttrs = AttrNonVolatile | AttrBootServiceAccess | AttrRuntimeAccess | AttrTimeBasedAuthenticatedWriteAccess

// Variable names a firmware variable and the attributes it is written
// with: what a time-based authenticated write signs besides the data.
type Variable struct {
	Name       string
	Vendor     efisig.GUID
	Attributes uint32
}

// VariableOf is the variable role's certificate is enrolled in: PK and
// KEK under the global variable GUID, db under the image security
// database's, all non-volatile, boot and runtime, time-based
// authenticated.
func VariableOf(r Role) Variable {
	vendor := efisig.EFIGlobalVariable()
	if r == DB {
		vendor = efisig.EFIImageSecurityDatabase()
	}
	return Variable{Name: string(r), Vendor: vendor, Attributes: secureBootAttrs}
}

// EFITime is an EFI_TIME as an authenticated variable carries it: the
// firmware requires its nanosecond, time zone, daylight and padding fields
// to be zero, so they are not here.
type EFITime struct {
	Year                 uint16
	Month, Day           uint8
	Hour, Minute, Second uint8
}

// NewEFITime is t in UTC, to the second.
func NewEFITime(t time.Time) EFITime {
	t = t.UTC()
	return EFITime{Year: uint16(t.Year()), Month: uint8(t.Month()), Day: uint8(t.Day()),
		Hour: uint8(t.Hour()), Minute: uint8(t.Minute()), Second: uint8(t.Second())}
}

// efiTimeSize is the size of an EFI_TIME.
const efiTimeSize = 16

func (t EFITime) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, t.Year)
	b = append(b, t.Month, t.Day, t.Hour, t.Minute, t.Second, 0) // Pad1
	b = binary.LittleEndian.AppendUint32(b, 0)                   // Nanosecond
	b = binary.LittleEndian.AppendUint16(b, 0)                   // TimeZone
	return append(b, 0, 0)                                       // Daylight, Pad2
}

// String is the time as efitools' -t takes it.
func (t EFITime) String() string {
	return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", t.Year, t.Month, t.Day, t.Hour, t.Minute, t.Second)
}

// SignedPayload is what an authenticated write of data to v at ts signs:
// the variable's name (UTF-16LE, without its terminator), its vendor
// GUID, its attributes, the timestamp, the data.
func SignedPayload(v Variable, ts EFITime, data []byte) []byte {
	name := utf16.Encode([]rune(v.Name))
	b := make([]byte, 0, 2*len(name)+16+4+efiTimeSize+len(data))
	for _, c := range name {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	b = append(b, v.Vendor[:]...)
	b = binary.LittleEndian.AppendUint32(b, v.Attributes)
	b = ts.append(b)
	return append(b, data...)
}

// AuthenticatedVariable is an EFI_VARIABLE_AUTHENTICATION_2 followed by
// the variable's new data: the content of an .auth file, which a firmware
// (or systemd-boot's secure-boot-enroll, or efi-updatevar -f) passes to
// SetVariable as it is.
type AuthenticatedVariable struct {
	Timestamp EFITime
	// SignedData is the DER PKCS#7 SignedData of the WIN_CERTIFICATE.
	SignedData []byte
	Data       []byte
}

// The WIN_CERTIFICATE_UEFI_GUID header: dwLength, wRevision,
// wCertificateType, CertType.
const (
	winCertHeaderSize   = 4 + 2 + 2 + 16
	winCertRevision     = 0x0200
	winCertTypeEFIGUID  = 0x0EF1
	authHeaderSize      = efiTimeSize + winCertHeaderSize
	maxSignedDataLength = math.MaxUint32 - winCertHeaderSize
)

// SignVariable makes the authenticated write of data to v at ts, signed
// by k: what efitools' `sign-efi-sig-list -t TS -c K.crt -k K.key` writes,
// byte for byte.
func SignVariable(v Variable, ts EFITime, data []byte, k *Key) (*AuthenticatedVariable, error) {
	sd, err := signPKCS7(SignedPayload(v, ts, data), k)
	if err != nil {
		return nil, fmt.Errorf("sign the update of %s: %w", v.Name, err)
	}
	return &AuthenticatedVariable{Timestamp: ts, SignedData: sd, Data: append([]byte(nil), data...)}, nil
}

// MarshalBinary encodes a as an .auth file.
func (a *AuthenticatedVariable) MarshalBinary() ([]byte, error) {
	if len(a.SignedData) > maxSignedDataLength {
		return nil, fmt.Errorf("encode authenticated variable: %w: a %d-byte signature", ErrMalformed, len(a.SignedData))
	}
	b := make([]byte, 0, authHeaderSize+len(a.SignedData)+len(a.Data))
	b = a.Timestamp.append(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(winCertHeaderSize+len(a.SignedData)))
	b = binary.LittleEndian.AppendUint16(b, winCertRevision)
	b = binary.LittleEndian.AppendUint16(b, winCertTypeEFIGUID)
	pkcs7 := efisig.EFICertTypePKCS7()
	b = append(b, pkcs7[:]...)
	b = append(b, a.SignedData...)
	return append(b, a.Data...), nil
}

// ParseAuthenticatedVariable reads an .auth file as a firmware's
// SetVariable does before it checks the signature: a timestamp whose
// extra fields are zero, a WIN_CERTIFICATE_UEFI_GUID of revision 2.0
// holding PKCS#7, its length inside the file; the rest is the data.
// Errors wrap ErrMalformed. What it accepts, MarshalBinary writes back
// byte for byte. The signature is checked by Verify.
func ParseAuthenticatedVariable(b []byte) (*AuthenticatedVariable, error) {
	bad := func(format string, args ...any) (*AuthenticatedVariable, error) {
		return nil, fmt.Errorf("authenticated variable: %w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(b) < authHeaderSize {
		return bad("%d bytes, less than its %d-byte header", len(b), authHeaderSize)
	}
	a := &AuthenticatedVariable{Timestamp: EFITime{
		Year: binary.LittleEndian.Uint16(b), Month: b[2], Day: b[3], Hour: b[4], Minute: b[5], Second: b[6],
	}}
	for _, z := range b[7:efiTimeSize] {
		if z != 0 {
			return bad("the timestamp's nanosecond, time zone, daylight or padding is not zero")
		}
	}
	h := b[efiTimeSize:]
	length := uint64(binary.LittleEndian.Uint32(h))
	switch {
	case binary.LittleEndian.Uint16(h[4:]) != winCertRevision:
		return bad("WIN_CERTIFICATE revision %#04x, not 0x0200", binary.LittleEndian.Uint16(h[4:]))
	case binary.LittleEndian.Uint16(h[6:]) != winCertTypeEFIGUID:
		return bad("WIN_CERTIFICATE type %#04x, not WIN_CERT_TYPE_EFI_GUID", binary.LittleEndian.Uint16(h[6:]))
	case efisig.GUID(h[8:24]) != efisig.EFICertTypePKCS7():
		return bad("certificate type %s, not PKCS#7", efisig.GUID(h[8:24]))
	case length <= winCertHeaderSize:
		return bad("WIN_CERTIFICATE length %d holds no signature", length)
	case length > uint64(len(h)):
		return bad("WIN_CERTIFICATE length %d runs past the end (%d bytes left)", length, len(h))
	}
	a.SignedData = append([]byte(nil), h[winCertHeaderSize:length]...)
	a.Data = append([]byte{}, h[length:]...)
	return a, nil
}

// Verify checks that cert signed a as a write to v.
func (a *AuthenticatedVariable) Verify(v Variable, cert *x509.Certificate) error {
	sd, err := parsePKCS7(a.SignedData)
	if err != nil {
		return fmt.Errorf("verify the update of %s: %w", v.Name, err)
	}
	if err := sd.verify(SignedPayload(v, a.Timestamp, a.Data), cert); err != nil {
		return fmt.Errorf("verify the update of %s: %w", v.Name, err)
	}
	return nil
}
