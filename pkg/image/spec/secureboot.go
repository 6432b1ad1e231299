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
	if !slices.Contains(enrollModes(), sb.Enroll) {
		p.Addf(path.Field("enroll"), "is %q; use %s", sb.Enroll, strings.Join(enrollModes(), ", "))
	}
	if s.WantsOutput(OutputISO) {
		p.Addf(root.Field("outputs"), "lists iso, which cannot carry signed unified kernel images yet (one is about 18 MiB, the ISO's El Torito image at most 32 MiB, and it needs two); build the ISO from a spec without secureBoot")
	}
}
