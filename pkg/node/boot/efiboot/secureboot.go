package efiboot

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
)

// SecureBootMode is what the firmware says of Secure Boot.
type SecureBootMode string

// The firmware's Secure Boot modes, from its SecureBoot and SetupMode
// variables.
const (
	// SecureBootOn: the firmware runs only what its db allows.
	SecureBootOn SecureBootMode = "on"
	// SecureBootOff: a PK is enrolled, and the firmware does not check.
	SecureBootOff SecureBootMode = "off"
	// SecureBootSetup: no PK is enrolled: keys can be enrolled by anyone
	// who boots the machine.
	SecureBootSetup SecureBootMode = "setup mode"
	// SecureBootNone: no UEFI variables (a BIOS boot, or efivarfs absent).
	SecureBootNone SecureBootMode = "not available"
)

// SecureBoot reads the firmware's Secure Boot mode from its SecureBoot
// and SetupMode variables (one byte each).
func (v Vars) SecureBoot() (SecureBootMode, error) {
	sb, err := v.read("SecureBoot")
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(v.Dir); derr != nil {
			return SecureBootNone, nil
		}
		// Old firmware without the variable does not check signatures.
		return SecureBootOff, nil
	}
	if err != nil {
		return "", fmt.Errorf("read SecureBoot: %w", err)
	}
	if len(sb) != 1 {
		return "", fmt.Errorf("efi variable SecureBoot: %d bytes, want 1", len(sb))
	}
	if sb[0] == 1 {
		return SecureBootOn, nil
	}
	setup, err := v.read("SetupMode")
	if err == nil && len(setup) == 1 && setup[0] == 1 {
		return SecureBootSetup, nil
	}
	return SecureBootOff, nil
}

// DBCertificates returns the X.509 certificates in the firmware's db:
// what it lets run under Secure Boot (hashes and other entries are passed
// over).
func (v Vars) DBCertificates() ([]*x509.Certificate, error) {
	b, err := readVar(filepath.Join(v.Dir, "db-"+efisig.EFIImageSecurityDatabase().String()), "db")
	if err != nil {
		return nil, fmt.Errorf("read the firmware's db: %w", err)
	}
	lists, err := efisig.ParseSignatureLists(b)
	if err != nil {
		return nil, fmt.Errorf("the firmware's db: %w", err)
	}
	certs, err := efisig.Certificates(lists)
	if err != nil {
		return nil, fmt.Errorf("the firmware's db: %w", err)
	}
	return certs, nil
}
