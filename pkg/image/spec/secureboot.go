package spec

import (
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
)

// SecureBoot holds the settings of a Secure Boot image
// (docs/secure-boot.md): systemd-boot and one unified kernel image per
// slot, signed with the site's db key, and the site's enrollment files on
// the ESP. Without Keys the image boots with Secure Boot off.
type SecureBoot struct {
	// Keys is the site's key set directory (`imagebuild secureboot keys`),
	// relative to the spec. Only its db key signs; PK and KEK sign the
	// enrollment files.
	Keys string `yaml:"keys,omitempty"`
	// Enroll is what systemd-boot does with the enrollment files on a
	// machine in setup mode (loader.conf's secure-boot-enroll): if-safe
	// (the default: enrolls by itself in a virtual machine, offers a menu
	// entry on hardware), manual (a menu entry only), force (enrolls on
	// hardware too, after a 15-second countdown) or off (the ESP carries
	// no enrollment files: the keys are enrolled in the firmware's setup).
	Enroll string `yaml:"enroll,omitempty"`
	// ExtraDB are certificates enrolled in db besides the site's own: e.g.
	// Microsoft's UEFI CA on hardware whose graphics or network option
	// ROMs it signed, which the firmware must still run.
	ExtraDB []ExtraDBCert `yaml:"extraDB,omitempty"`
}

// ExtraDBCert is a certificate for db and its owner.
type ExtraDBCert struct {
	// Cert is the certificate file, PEM or DER, relative to the spec.
	Cert string `yaml:"cert"`
	// Owner is the GUID the signature list records as its owner
	// (Microsoft's is 77fa9abd-0359-4d32-bd60-28f4e78f784b).
	Owner string `yaml:"owner"`
}

// Values of SecureBoot.Enroll.
const (
	EnrollIfSafe = "if-safe"
	EnrollManual = "manual"
	EnrollForce  = "force"
	EnrollOff    = "off"
)

func enrollModes() []string { return []string{EnrollIfSafe, EnrollManual, EnrollForce, EnrollOff} }

// SecureBootOn reports whether the image is signed for Secure Boot.
func (s *Spec) SecureBootOn() bool { return s.SecureBoot.Keys != "" }

// SecureBootKeys loads the spec's key set (whose problems Validate
// reported already).
func (s *Spec) SecureBootKeys() (*secureboot.KeySet, error) {
	return secureboot.Load(s.Resolve(s.SecureBoot.Keys))
}

// SecureBootExtraDB loads the certificates enrolled in db besides the
// site's (whose problems Validate reported already).
func (s *Spec) SecureBootExtraDB() ([]secureboot.ExtraCert, error) {
	var out []secureboot.ExtraCert
	for _, c := range s.SecureBoot.ExtraDB {
		e, err := secureboot.LoadExtraCert(s.Resolve(c.Cert), c.Owner)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *Spec) validateSecureBoot(p *strictyaml.Problems, root strictyaml.Path) {
	path := root.Field("secureBoot")
	sb := s.SecureBoot
	if sb.Keys == "" {
		if sb.Enroll != "" {
			p.Addf(path.Field("enroll"), "is set but secureBoot.keys is not: name the site's key set (imagebuild secureboot keys)")
		}
		return
	}
	if _, err := s.SecureBootKeys(); err != nil {
		p.Addf(path.Field("keys"), "%v", err)
	}
	for i, c := range sb.ExtraDB {
		if _, err := secureboot.LoadExtraCert(s.Resolve(c.Cert), c.Owner); err != nil {
			p.Addf(path.Field("extraDB").Index(i), "%v", err)
		}
	}
	if len(sb.ExtraDB) > 0 && sb.Enroll == EnrollOff {
		p.Addf(path.Field("extraDB"), "is set but enroll is off: the ESP carries no db to enroll them with; enroll them in the firmware's setup instead")
	}
	if !slices.Contains(enrollModes(), sb.Enroll) {
		p.Addf(path.Field("enroll"), "is %q; use %s", sb.Enroll, strings.Join(enrollModes(), ", "))
	}
}
