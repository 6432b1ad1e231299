package machineconfig

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// KeyPurpose is what a trusted key may sign. A key signs only for the
// purposes its entry lists, so that a key handed out to sign config changes
// cannot also sign an OS upgrade or an application bundle.
type KeyPurpose string

const (
	// PurposeConfig is for signed changes of this node's machine config.
	PurposeConfig KeyPurpose = "config"
	// PurposeBundle is for side-load bundles (TERRA-BUNDLE sticks, imagebuild
	// bundle disk --sign), and the tags they may move.
	PurposeBundle KeyPurpose = "bundle"
	// PurposeUpgrade is for OS upgrade files and the cluster's upgrade rollouts.
	PurposeUpgrade KeyPurpose = "upgrade"
)

// KeyPurposes lists every purpose, in the order documentation gives them.
var KeyPurposes = []KeyPurpose{PurposeConfig, PurposeBundle, PurposeUpgrade}

// TrustedKey is an entry of trustedKeys: a public key in signature's text
// form ("ed25519:<base64>") and what it may sign. In YAML it is either the
// bare key, trusted for configs only (the meaning trustedKeys always had),
// or a mapping:
//
//	trustedKeys:
//	  - ed25519:Ls0m7fU3V1...          # signs config changes
//	  - key: ed25519:C1E62bSSQB...
//	    purposes: [config, bundle]     # and side-load bundles
type TrustedKey struct {
	Key      string       `yaml:"key"`
	Purposes []KeyPurpose `yaml:"purposes,omitempty"`
}

// TrustKey is the entry for a key trusted for purposes (none: configs).
func TrustKey(k signature.PublicKey, purposes ...KeyPurpose) TrustedKey {
	return TrustedKey{Key: k.String(), Purposes: purposes}
}

// For reports whether the entry trusts its key for p.
func (k TrustedKey) For(p KeyPurpose) bool {
	if len(k.Purposes) == 0 {
		return p == PurposeConfig
	}
	return slices.Contains(k.Purposes, p)
}

// UnmarshalYAML takes a bare key or a {key, purposes} mapping; unknown
// fields of the mapping are errors, like everywhere in the config.
func (k *TrustedKey) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*k = TrustedKey{Key: n.Value}
		return nil
	case yaml.MappingNode:
		var out TrustedKey
		for i := 0; i+1 < len(n.Content); i += 2 {
			name, v := n.Content[i], n.Content[i+1]
			switch name.Value {
			case "key":
				if v.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: key must be a string like ed25519:<base64>", v.Line)
				}
				out.Key = v.Value
			case "purposes":
				if v.Kind != yaml.SequenceNode {
					return fmt.Errorf("line %d: purposes must be a list of %s", v.Line, purposeList())
				}
				for _, p := range v.Content {
					if p.Kind != yaml.ScalarNode {
						return fmt.Errorf("line %d: a purpose is one of %s", p.Line, purposeList())
					}
					out.Purposes = append(out.Purposes, KeyPurpose(p.Value))
				}
			default:
				return fmt.Errorf("line %d: field %q is not known in a trusted key; the fields are key and purposes", name.Line, name.Value)
			}
		}
		*k = out
		return nil
	default:
		return fmt.Errorf("line %d: a trusted key is ed25519:<base64> or {key: ed25519:<base64>, purposes: [...]}", n.Line)
	}
}

// MarshalYAML writes a key trusted for configs only as the bare key, so
// that configs written before purposes existed keep their digest.
func (k TrustedKey) MarshalYAML() (any, error) {
	if len(k.Purposes) == 0 {
		return k.Key, nil
	}
	type plain TrustedKey
	return plain(k), nil
}

func purposeList() string {
	s := make([]string, len(KeyPurposes))
	for i, p := range KeyPurposes {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// validateTrustedKeys checks that every entry of trustedKeys is a public
// key in signature's text form, listed once, with known purposes.
func validateTrustedKeys(ps *strictyaml.Problems, p strictyaml.Path, keys []TrustedKey) {
	seen := map[signature.PublicKey]strictyaml.Path{}
	for i, tk := range keys {
		at := p.Index(i)
		if len(tk.Purposes) > 0 {
			at = at.Field("key")
		}
		k, err := signature.ParsePublicKey(tk.Key)
		if err != nil {
			ps.Addf(at, "%v", err)
			continue
		}
		if first, dup := seen[k]; dup {
			ps.Addf(at, "same key as %s; list a key once, with all its purposes", first)
			continue
		}
		seen[k] = p.Index(i)
		dupPurpose := map[KeyPurpose]bool{}
		for j, pp := range tk.Purposes {
			switch {
			case !slices.Contains(KeyPurposes, pp):
				ps.Addf(p.Index(i).Field("purposes").Index(j), "%q is not a purpose; use %s", pp, purposeList())
			case dupPurpose[pp]:
				ps.Addf(p.Index(i).Field("purposes").Index(j), "%q is listed twice", pp)
			}
			dupPurpose[pp] = true
		}
	}
}

// KeysFor returns the keys trustedKeys trusts for purpose p, in order.
// Entries that do not parse are left out: Parse and Validate report them.
func (c *Config) KeysFor(p KeyPurpose) []signature.PublicKey {
	var out []signature.PublicKey
	for _, tk := range c.TrustedKeys {
		if !tk.For(p) {
			continue
		}
		if k, err := signature.ParsePublicKey(tk.Key); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// TrustedPublicKeys returns every key of trustedKeys, whatever its
// purposes: a node that trusts any key is a node whose inputs must be
// signed.
func (c *Config) TrustedPublicKeys() []signature.PublicKey {
	var out []signature.PublicKey
	for _, tk := range c.TrustedKeys {
		if k, err := signature.ParsePublicKey(tk.Key); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// BundleKeys are the keys a side-load bundle may be signed by: those
// trusted for bundles and, when registry.signedBundlesOnly is set (which
// predates purposes and named bare keys for bundles), every bare key too.
func (c *Config) BundleKeys() []signature.PublicKey {
	keys := c.KeysFor(PurposeBundle)
	if c.Registry == nil || !c.Registry.SignedBundlesOnly {
		return keys
	}
	for _, tk := range c.TrustedKeys {
		if len(tk.Purposes) > 0 {
			continue
		}
		if k, err := signature.ParsePublicKey(tk.Key); err == nil && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}
