package machineconfig

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// Validate checks c and returns every problem found as a
// strictyaml.Problems, one per line as "<path>: <message>", or nil. It does
// not apply defaults; Parse does that before validating.
func (c *Config) Validate() error {
	return c.validate().Err()
}

func (c *Config) validate() strictyaml.Problems {
	var ps strictyaml.Problems
	root := strictyaml.Root()
	validateHeader(&ps, c.APIVersion, c.Kind)
	if msg := hostnameProblem(c.Hostname); msg != "" {
		ps.Addf(root.Field("hostname"), "%s", msg)
	}
	validateNetwork(&ps, root.Field("network"), c.Network)
	if c.Admin != nil {
		validateAdmin(&ps, root.Field("admin"), *c.Admin)
	}
	validateTrustedKeys(&ps, root.Field("trustedKeys"), c.TrustedKeys)
	if c.Registry != nil {
		validateRegistry(&ps, root.Field("registry"), *c.Registry, c.Cluster != nil && c.Cluster.PKI != nil, len(c.TrustedKeys) > 0)
	}
	if c.Cluster != nil {
		validateCluster(&ps, root.Field("cluster"), *c.Cluster, c.Network, c.Hostname)
	}
	if c.Install != nil {
		validateInstall(&ps, root.Field("install"), *c.Install)
	}
	if c.State != nil {
		validateState(&ps, root.Field("state"), *c.State)
	}
	if c.Ignition != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.Ignition), &obj); err != nil {
			ps.Addf(root.Field("ignition"), "is not a JSON object (an Ignition v3 config, written under ignition: |): %v", err)
		}
	}
	return ps
}

// hostnameProblem says what is wrong with a hostname, or returns "".
func hostnameProblem(h string) string {
	const fix = "use 1-63 characters of a-z, 0-9 and '-', like node-1"
	switch {
	case h == "":
		return "required; set it to a DNS label like node-1"
	case strings.Contains(h, "."):
		label, _, _ := strings.Cut(h, ".")
		return fmt.Sprintf("%q is a domain name, not a single DNS label; use just the host part, like %q", h, label)
	case len(h) > 63:
		return fmt.Sprintf("%q is %d characters long; a hostname has at most 63", h, len(h))
	case h != strings.ToLower(h) && isLabel(strings.ToLower(h)):
		return fmt.Sprintf("%q has upper-case letters; hostnames are lower-case, like %q", h, strings.ToLower(h))
	case strings.HasPrefix(h, "-") || strings.HasSuffix(h, "-"):
		return fmt.Sprintf("%q starts or ends with '-'; %s", h, fix)
	case !isLabel(h):
		return fmt.Sprintf("%q is not a valid hostname; %s", h, fix)
	}
	return ""
}

// isLabel reports whether s is an RFC 1123 DNS label in lower case.
func isLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
