package machineconfig

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// SecretsEncryptionKeyBytes is the size of the key Secrets are encrypted
// with in etcd (kube-apiserver's secretbox provider takes 32 bytes).
const SecretsEncryptionKeyBytes = 32

// RotateSecretsKeyCommand is the operator's command that rotates a
// cluster's secrets encryption key (docs/security.md#rotating-the-key).
const RotateSecretsKeyCommand = "imagebuild config cluster --rotate-secrets-key"

// The Pod Security Standards' levels, from the most to the least
// permissive.
const (
	PodSecurityPrivileged = "privileged"
	PodSecurityBaseline   = "baseline"
	PodSecurityRestricted = "restricted"
)

// AllPodSecurityLevels are the levels a mode of PodSecurity takes.
func AllPodSecurityLevels() []string {
	return []string{PodSecurityPrivileged, PodSecurityBaseline, PodSecurityRestricted}
}

// PodSecurity are the cluster-wide defaults of Pod Security admission:
// pods a namespace's labels do not say otherwise about are refused below
// Enforce, recorded in the audit log below Audit, and answered with a
// warning below Warn. An empty mode takes DefaultPodSecurity's level.
type PodSecurity struct {
	Enforce string `yaml:"enforce,omitempty"`
	Audit   string `yaml:"audit,omitempty"`
	Warn    string `yaml:"warn,omitempty"`
}

// DefaultPodSecurity returns baseline enforced (no privileged pod, no host
// namespaces or host paths), restricted audited and warned about.
func DefaultPodSecurity() PodSecurity {
	return PodSecurity{Enforce: PodSecurityBaseline, Audit: PodSecurityRestricted, Warn: PodSecurityRestricted}
}

// withDefaults fills the empty modes of p from DefaultPodSecurity.
func (p PodSecurity) withDefaults() PodSecurity {
	d := DefaultPodSecurity()
	for _, m := range []struct{ v, def *string }{{&p.Enforce, &d.Enforce}, {&p.Audit, &d.Audit}, {&p.Warn, &d.Warn}} {
		if *m.v == "" {
			*m.v = *m.def
		}
	}
	return p
}

// String is p as ParsePodSecurity reads it.
func (p PodSecurity) String() string {
	return fmt.Sprintf("enforce=%s,audit=%s,warn=%s", p.Enforce, p.Audit, p.Warn)
}

// PodSecurityLevels are the cluster's Pod Security admission levels, the
// defaults filled in.
func (c *Cluster) PodSecurityLevels() PodSecurity {
	if c.PodSecurity == nil {
		return DefaultPodSecurity()
	}
	return c.PodSecurity.withDefaults()
}

// ParsePodSecurity reads levels written as `imagebuild config cluster
// --pod-security` takes them: MODE=LEVEL pairs joined by commas
// ("enforce=baseline,warn=restricted,audit=restricted"); a mode left out
// keeps its default.
func ParsePodSecurity(s string) (*PodSecurity, error) {
	var p PodSecurity
	seen := map[string]bool{}
	for _, pair := range strings.Split(s, ",") {
		mode, level, ok := strings.Cut(strings.TrimSpace(pair), "=")
		var dst *string
		switch mode {
		case "enforce":
			dst = &p.Enforce
		case "audit":
			dst = &p.Audit
		case "warn":
			dst = &p.Warn
		}
		switch {
		case !ok || dst == nil:
			return nil, fmt.Errorf("pod security %q: write MODE=LEVEL pairs joined by commas, MODE one of enforce, audit, warn (like enforce=baseline,warn=restricted,audit=restricted)", pair)
		case seen[mode]:
			return nil, fmt.Errorf("pod security: %s is given twice", mode)
		case !slices.Contains(AllPodSecurityLevels(), level):
			return nil, fmt.Errorf("pod security %s=%s: %s", mode, level, levelProblem(level))
		}
		seen[mode] = true
		*dst = level
	}
	return &p, nil
}

func levelProblem(level string) string {
	return fmt.Sprintf("%s is not a Pod Security level; use %s", quote(level), strings.Join(AllPodSecurityLevels(), ", "))
}

// validateHardening checks the secrets encryption key and the Pod
// Security levels: both are the control planes' (the API server's), and a
// worker that carries them was not made by imagebuild config cluster.
func validateHardening(ps *strictyaml.Problems, p strictyaml.Path, c Cluster) {
	if k := c.SecretsEncryptionKey; k != "" {
		f := p.Field("secretsEncryptionKey")
		if !c.IsControlPlane() {
			ps.Addf(f, "workers run no API server and must not hold the key of the cluster's Secrets; remove secretsEncryptionKey from a worker's config")
		} else {
			validateEncryptionKey(ps, f, k)
		}
	}
	if len(c.RetiredSecretsEncryptionKeys) > 0 {
		f := p.Field("retiredSecretsEncryptionKeys")
		switch {
		case !c.IsControlPlane():
			ps.Addf(f, "workers run no API server and must not hold the keys of the cluster's Secrets; remove retiredSecretsEncryptionKeys from a worker's config")
		case c.SecretsEncryptionKey == "":
			ps.Addf(f, "retired keys need a current secretsEncryptionKey to rotate to; regenerate the node configs with imagebuild config cluster")
		default:
			seen := map[string]bool{c.SecretsEncryptionKey: true}
			for i, k := range c.RetiredSecretsEncryptionKeys {
				fi := f.Index(i)
				if seen[k] {
					// Neither key is quoted: both are secret.
					ps.Addf(fi, "is the current key or an earlier entry again; each key is listed once")
					continue
				}
				seen[k] = true
				validateEncryptionKey(ps, fi, k)
			}
		}
	}
	if c.PodSecurity == nil {
		return
	}
	f := p.Field("podSecurity")
	if !c.IsControlPlane() {
		ps.Addf(f, "workers run no API server, whose admission sets the levels; remove podSecurity from a worker's config")
		return
	}
	for _, m := range []struct{ key, level string }{{"enforce", c.PodSecurity.Enforce}, {"audit", c.PodSecurity.Audit}, {"warn", c.PodSecurity.Warn}} {
		if m.level != "" && !slices.Contains(AllPodSecurityLevels(), m.level) {
			ps.Addf(f.Field(m.key), "%s (or leave it out for %s)", levelProblem(m.level), fieldOf(DefaultPodSecurity(), m.key))
		}
	}
}

// validateEncryptionKey checks one secrets encryption key at f; the key
// is secret, so no problem quotes it.
func validateEncryptionKey(ps *strictyaml.Problems, f strictyaml.Path, k string) {
	const fix = "regenerate the node configs with imagebuild config cluster, which keeps the key in the cluster's secrets file"
	b, err := base64.StdEncoding.Strict().DecodeString(k)
	switch {
	case err != nil:
		ps.Addf(f, "is not standard base64 (want %d random bytes, %d characters); %s", SecretsEncryptionKeyBytes, base64.StdEncoding.EncodedLen(SecretsEncryptionKeyBytes), fix)
	case len(b) != SecretsEncryptionKeyBytes:
		ps.Addf(f, "decodes to %d bytes, not %d; %s", len(b), SecretsEncryptionKeyBytes, fix)
	}
}

// fieldOf is p's level of mode.
func fieldOf(p PodSecurity, mode string) string {
	switch mode {
	case "enforce":
		return p.Enforce
	case "audit":
		return p.Audit
	}
	return p.Warn
}
