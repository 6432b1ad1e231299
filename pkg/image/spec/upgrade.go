package spec

import (
	"os"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// Upgrade holds the settings of the upgrade file (terrarium-VERSION.upgrade)
// and of the keys the image trusts for the next one.
type Upgrade struct {
	// SigningKey is an ed25519 key file (`imagebuild config keygen`),
	// relative to the spec: the build signs its upgrade file with it, and
	// the image trusts its public half for later upgrade files. Without
	// it, the build writes no upgrade file.
	SigningKey string `yaml:"signingKey,omitempty"`
	// TrustedKeys are more public keys (ed25519:...) the image trusts for
	// upgrade files: the next key, before a rotation.
	TrustedKeys []string `yaml:"trustedKeys,omitempty"`
	// MinFromVersion is the lowest installed version this build's upgrade
	// file may be installed over; default 0.0.0 (any).
	MinFromVersion string `yaml:"minFromVersion,omitempty"`
}

func (s *Spec) validateUpgrade(p *strictyaml.Problems, path strictyaml.Path) {
	u := s.Upgrade
	if u.SigningKey != "" {
		if b, err := os.ReadFile(s.Resolve(u.SigningKey)); err != nil {
			p.Addf(path.Field("signingKey"), "%q cannot be read (paths are relative to the spec file; make one with `imagebuild config keygen`): %v", u.SigningKey, err)
		} else if _, err := signature.ParsePrivateKey(b); err != nil {
			p.Addf(path.Field("signingKey"), "%q is not an ed25519 signing key (make one with `imagebuild config keygen`): %v", u.SigningKey, err)
		}
	}
	for i, k := range u.TrustedKeys {
		if _, err := signature.ParsePublicKey(k); err != nil {
			p.Addf(path.Field("trustedKeys").Index(i), "%v", err)
		}
	}
	if u.MinFromVersion != "" {
		if err := upgrade.CheckVersion(u.MinFromVersion); err != nil {
			p.Addf(path.Field("minFromVersion"), "%v", err)
		} else if err := upgrade.CheckVersion(s.Version); err != nil {
			p.Addf(strictyaml.Root().Field("version"), "%v; an upgrade file needs a semantic version", err)
		}
	}
	if u.SigningKey != "" && u.MinFromVersion == "" {
		if err := upgrade.CheckVersion(s.Version); err != nil {
			p.Addf(strictyaml.Root().Field("version"), "%v; an upgrade file needs a semantic version", err)
		}
	}
}

// UpgradeKeys are the public keys the image trusts for upgrade files: the
// signing key's public half and the trusted keys, in that order.
func (s *Spec) UpgradeKeys() ([]signature.PublicKey, error) {
	var keys []signature.PublicKey
	if s.Upgrade.SigningKey != "" {
		k, err := signature.LoadPrivateKey(s.Resolve(s.Upgrade.SigningKey))
		if err != nil {
			return nil, err
		}
		keys = append(keys, signature.PublicKeyOf(k))
	}
	for _, t := range s.Upgrade.TrustedKeys {
		k, err := signature.ParsePublicKey(t)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}
