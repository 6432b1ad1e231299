package support

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryd"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
)

const (
	// maxSecretFile caps each file read for secrets; key files and
	// kubeconfigs are a few KiB.
	maxSecretFile = 1 << 20
	// maxKeyFiles caps how many files the key directories may offer.
	maxKeyFiles = 512
)

// keyDirs hold the node's private keys, as *.key or *.pem files.
func keyDirs() []string {
	return []string{kubeadmflow.KubernetesPKIDir, "/var/lib/kubelet/pki", "/etc/terrarium/pki"}
}

// kubeconfigs may embed client keys.
func kubeconfigs() []string {
	return []string{
		kubeadmflow.AdminKubeconfig, "/etc/kubernetes/super-admin.conf",
		"/etc/kubernetes/controller-manager.conf", "/etc/kubernetes/scheduler.conf",
		kubeadmflow.KubeletKubeconfig, kubeadmflow.BootstrapKubeconfig,
	}
}

// ConfigSecrets lists the secret values of a machine config, for a
// Redactor: every value that machineconfig's RedactSecrets replaces (the
// fields machineconfig.Fields classifies as secret: the bootstrap token,
// the cluster's CA keys, the service-account key, kubeadm's certificate
// key, the registry's serving and client keys, and in the Ignition config
// the password hashes, the resources' URLs and HTTP header values, the
// proxies and the units' contents; and whatever the Ignition config holds
// outside its spec), and what each holds that may show up on its own: a
// token's secret half and the private keys in a value, a data: URL's
// payload and decoded contents, a URL's password and query, the values a
// unit sets with Environment=. Certificates, hashes and public keys are
// not secret. Blank values and repeats are left out.
func ConfigSecrets(c *machineconfig.Config) []string {
	var out []string
	seen := map[string]bool{}
	add := func(vs ...string) {
		for _, v := range vs {
			if t := strings.TrimSpace(v); t != "" && !seen[t] {
				seen[t] = true
				out = append(out, v)
			}
		}
	}
	for _, s := range c.Secrets() {
		add(s.Value)
		add(textSecrets([]byte(s.Value))...)
		switch s.Class {
		case machineconfig.SecretURL:
			add(urlSecrets(s.Value)...)
		case machineconfig.SecretText:
			add(unitSecrets(s.Value)...)
		}
	}
	return out
}

// RedactConfig returns a copy of c whose secrets (those ConfigSecrets
// starts from) are replaced by their Marker and what they were: "[REDACTED
// sha256:1a2b3c4d, 227 B: PEM EC PRIVATE KEY]". c is not modified.
func RedactConfig(c *machineconfig.Config) *machineconfig.Config {
	return c.RedactSecrets(redactField)
}

// nodeConfig is the node's stored machine config as the bundle sees it.
type nodeConfig struct {
	// cfg is the config, parsed strictly or, when that fails, leniently;
	// nil when it could not be read or is not YAML.
	cfg *machineconfig.Config
	// err says why the config was not read or does not parse; with a
	// non-nil cfg the config is readable but invalid.
	err error
}

// loadStoredConfig reads and parses the machine config the node enrolled
// with.
func loadStoredConfig(h *host.Host) (nodeConfig, []byte) {
	raw, err := nodestate.On(h).ReadConfig()
	return parseConfig(nodestate.ConfigFile.String(), raw, err)
}

// loadConfig reads and parses the machine config at p (a host path).
func loadConfig(h *host.Host, p string) (nodeConfig, []byte) {
	raw, err := readCapped(h.Path(p), maxSecretFile)
	return parseConfig(p, raw, err)
}

// parseConfig parses raw, the machine config read from p (err the read's
// error), strictly or else leniently.
func parseConfig(p string, raw []byte, err error) (nodeConfig, []byte) {
	if err != nil {
		return nodeConfig{err: hostPathError(err, p)}, nil
	}
	cfg, err := machineconfig.Parse(p, raw)
	if err == nil {
		return nodeConfig{cfg: cfg}, raw
	}
	var lenient machineconfig.Config
	if yerr := yaml.Unmarshal(raw, &lenient); yerr != nil {
		return nodeConfig{err: fmt.Errorf("%s is not YAML: %w", p, yerr)}, raw
	}
	return nodeConfig{cfg: &lenient, err: err}, raw
}

// hostSecrets gathers every secret the node holds: those of its stored
// and embedded machine configs, the private keys in its key directories
// and the registry's, and the client keys of its kubeconfigs. What cannot
// be read is skipped: redaction by pattern still applies to it.
func hostSecrets(h *host.Host, stored nodeConfig, storedRaw []byte) []string {
	var out []string
	if stored.cfg != nil {
		out = append(out, ConfigSecrets(stored.cfg)...)
	}
	out = append(out, textSecrets(storedRaw)...)
	if embedded, raw := loadConfig(h, layout.EmbeddedConfig); embedded.cfg != nil || raw != nil {
		if embedded.cfg != nil {
			out = append(out, ConfigSecrets(embedded.cfg)...)
		}
		out = append(out, textSecrets(raw)...)
	}
	out = append(out, keyFileSecrets(h)...)
	for _, p := range kubeconfigs() {
		if raw, err := readCapped(h.Path(p), maxSecretFile); err == nil {
			out = append(out, kubeconfigSecrets(raw)...)
		}
	}
	return out
}

// keyFileSecrets reads the private keys under keyDirs and the registry's
// serving key.
func keyFileSecrets(h *host.Host) []string {
	var paths []string
	for _, dir := range keyDirs() {
		_ = filepath.WalkDir(h.Path(dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || len(paths) >= maxKeyFiles {
				return nil // unreadable or missing: nothing to learn there
			}
			if d.Type().IsRegular() && (strings.HasSuffix(p, ".key") || strings.HasSuffix(p, ".pem")) {
				paths = append(paths, p)
			}
			return nil
		})
	}
	if raw, err := readCapped(h.Path(layout.RegistryConfigFile), maxSecretFile); err == nil {
		var rc registryd.Config
		if json.Unmarshal(raw, &rc) == nil && rc.KeyFile != "" {
			paths = append(paths, h.Path(rc.KeyFile))
		}
	}
	var out []string
	for _, p := range paths {
		raw, err := readCapped(p, maxSecretFile)
		if err != nil {
			continue
		}
		if strings.HasSuffix(p, ".key") && !strings.Contains(string(raw), "-----BEGIN") {
			out = append(out, string(raw)) // a raw key, such as an encryption key
			continue
		}
		out = append(out, textSecrets(raw)...)
	}
	return out
}

// textSecrets finds the private key blocks and bootstrap tokens in text.
func textSecrets(text []byte) []string {
	var out []string
	for _, loc := range pemBegin.FindAllIndex(text, -1) {
		rest := text[loc[1]:min(len(text), loc[1]+maxPEMSpan)]
		if e := pemEnd.FindIndex(rest); e != nil {
			out = append(out, string(text[loc[0]:loc[1]+e[1]]))
		}
	}
	for _, tok := range bootstrapToken.FindAll(text, -1) {
		out = append(out, string(tok))
		out = append(out, string(tok[strings.IndexByte(string(tok), '.')+1:]))
	}
	return out
}

// kubeconfigSecrets finds a kubeconfig's embedded client keys, both as
// written (base64) and decoded, and its tokens.
func kubeconfigSecrets(raw []byte) []string {
	out := textSecrets(raw)
	for _, m := range kubeconfigKey.FindAllSubmatch(raw, -1) {
		out = append(out, string(m[1]))
		if key, err := base64.StdEncoding.DecodeString(string(m[1])); err == nil {
			out = append(out, string(key))
		}
	}
	return out
}

// readCapped reads at most limit bytes of the file p, failing when it is
// longer or not a regular file.
func readCapped(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: p, Err: errNotRegular}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &os.PathError{Op: "read", Path: p, Err: fmt.Errorf("longer than %d bytes", limit)}
	}
	return data, nil
}
