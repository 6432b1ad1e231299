// Package efisig reads and writes what UEFI Secure Boot keeps in its
// variables: GUIDs in the firmware's byte order, and EFI_SIGNATURE_LISTs
// (the content of PK, KEK, db and dbx, and of .esl files). The build
// writes them for enrollment; a node reads its firmware's db to check,
// before it installs a slot, what the firmware would run.
package efisig

import (
	"fmt"

	"github.com/google/uuid"
)

// GUID is an EFI_GUID in its in-memory (and on-disk) byte order: the first
// three fields little-endian, the last eight bytes as written. Its String
// is the usual text form, the one efitools' -g takes.
type GUID [16]byte

// The UEFI specification's GUIDs that Terrarium needs, as functions:
// a GUID is an array, and a package variable could be changed.

// EFIGlobalVariable is the vendor GUID of PK and KEK
// (8be4df61-93ca-11d2-aa0d-00e098032b8c).
func EFIGlobalVariable() GUID {
	return GUID{0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c}
}

// EFIImageSecurityDatabase is the vendor GUID of db and dbx
// (d719b2cb-3d3a-4596-a3bc-dad00e67656f).
func EFIImageSecurityDatabase() GUID {
	return GUID{0xcb, 0xb2, 0x19, 0xd7, 0x3a, 0x3d, 0x96, 0x45, 0xa3, 0xbc, 0xda, 0xd0, 0x0e, 0x67, 0x65, 0x6f}
}

// EFICertX509 types a signature list of DER X.509 certificates
// (a5c059a1-94e4-4aa7-87b5-ab155c2bf072).
func EFICertX509() GUID {
	return GUID{0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a, 0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72}
}

// EFICertTypePKCS7 types a WIN_CERTIFICATE_UEFI_GUID holding PKCS#7
// SignedData (4aafd29d-68df-49ee-8aa9-347d375665a7).
func EFICertTypePKCS7() GUID {
	return GUID{0x9d, 0xd2, 0xaf, 0x4a, 0xdf, 0x68, 0xee, 0x49, 0x8a, 0xa9, 0x34, 0x7d, 0x37, 0x56, 0x65, 0xa7}
}

// ParseGUID reads a GUID's text form.
func ParseGUID(s string) (GUID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return GUID{}, fmt.Errorf("parse GUID %q: %w", s, err)
	}
	if len(s) != 36 {
		return GUID{}, fmt.Errorf("parse GUID %q: want the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	return fromUUID(u), nil
}

// NewGUID returns a random (version 4) GUID from crypto/rand.
func NewGUID() (GUID, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return GUID{}, fmt.Errorf("make a random GUID: %w", err)
	}
	return fromUUID(u), nil
}

// fromUUID turns a UUID's big-endian bytes into EFI byte order.
func fromUUID(u uuid.UUID) GUID {
	var g GUID
	g[0], g[1], g[2], g[3] = u[3], u[2], u[1], u[0]
	g[4], g[5] = u[5], u[4]
	g[6], g[7] = u[7], u[6]
	copy(g[8:], u[8:])
	return g
}

// String is the GUID's text form, lower case.
func (g GUID) String() string {
	var u uuid.UUID
	u[0], u[1], u[2], u[3] = g[3], g[2], g[1], g[0]
	u[4], u[5] = g[5], g[4]
	u[6], u[7] = g[7], g[6]
	copy(u[8:], g[8:])
	return u.String()
}
