package machineconfig

import (
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// validateTrustedKeys checks that every entry of trustedKeys is a public
// key in signature's text form, listed once.
func validateTrustedKeys(ps *strictyaml.Problems, p strictyaml.Path, keys []string) {
	seen := map[signature.PublicKey]strictyaml.Path{}
	for i, s := range keys {
		k, err := signature.ParsePublicKey(s)
		if err != nil {
			ps.Addf(p.Index(i), "%v", err)
			continue
		}
		if first, dup := seen[k]; dup {
			ps.Addf(p.Index(i), "same key as %s; remove the duplicate", first)
			continue
		}
		seen[k] = p.Index(i)
	}
}

// TrustedPublicKeys returns the keys of TrustedKeys, in order, for
// signature.Verify. Entries that do not parse are left out: Parse and
// Validate report them.
func (c *Config) TrustedPublicKeys() []signature.PublicKey {
	var out []signature.PublicKey
	for _, s := range c.TrustedKeys {
		if k, err := signature.ParsePublicKey(s); err == nil {
			out = append(out, k)
		}
	}
	return out
}
