// Package registryphase configures the node's image registry: containerd's
// hosts.toml per upstream (the peers as mirrors), the registry's PKI and its
// registry.json. A control plane that serves its images and got no
// certificate issues one from the cluster CA. Only the registry restarts
// (or, on a first boot, starts), and only when one of its files changed.
package registryphase

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/mirrors"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryd"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
)

// Where the registry phase writes.
const (
	certsDir       = "/etc/containerd/certs.d"
	registryPKIDir = "/etc/terrarium/pki"
)

// Phase is the registry-mirrors phase on a host.
func Phase(h *host.Host) phase.Phase {
	return phase.Phase{Name: "registry-mirrors", Apply: phase.On(h, applyRegistry), Verify: phase.On(h, verifyRegistry)}
}

// registryFiles renders every file of the registry phase: hosts.toml per
// upstream, PKI material and registry.json. Modes go with the content.
func registryFiles(c *machineconfig.Config) (map[string]string, map[string]os.FileMode, error) {
	r := machineconfig.Registry{}
	if c.Registry != nil {
		r = *c.Registry
	}
	files, modes := map[string]string{}, map[string]os.FileMode{}
	rc := registryd.Config{Serve: r.Serve, Listen: r.Listen, Peers: r.Peers,
		// A node that trusts any key takes only bundles signed by a key
		// it trusts for bundles; one that trusts none takes them unsigned.
		RequireSignedBundles: len(c.TrustedPublicKeys()) > 0,
		StateReserveBytes:    c.StateReserveBytes(),
	}
	for _, k := range c.BundleKeys() {
		rc.BundleKeys = append(rc.BundleKeys, k.String())
	}
	add := func(path, content string, mode os.FileMode) {
		files[path], modes[path] = content, mode
	}
	if r.CA != "" {
		rc.CAFile = registryPKIDir + "/registry-ca.pem"
		add(rc.CAFile, r.CA, 0o644)
	}
	if r.Serve {
		rc.CertFile, rc.KeyFile = registryPKIDir+"/registry.pem", registryPKIDir+"/registry-key.pem"
		if !issuesRegistryCert(c) {
			add(rc.CertFile, r.Certificate, 0o644)
			add(rc.KeyFile, r.Key, 0o600)
		}
	}
	// What the node shows its peers: the config's client certificate, or
	// on a cluster node its kubelet's (there once the node has joined).
	switch {
	case r.ClientCertificate != "":
		rc.ClientCertFile, rc.ClientKeyFile = registryPKIDir+"/registry-client.pem", registryPKIDir+"/registry-client-key.pem"
		add(rc.ClientCertFile, r.ClientCertificate, 0o644)
		add(rc.ClientKeyFile, r.ClientKey, 0o600)
	case c.Cluster != nil && (len(r.Peers) > 0 || r.Serve):
		rc.ClientCertFile, rc.ClientKeyFile = layout.KubeletClientCert, layout.KubeletClientCert
	}
	for rel, content := range mirrors.Files() {
		add(filepath.Join(certsDir, rel), content, 0o644)
	}
	b, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	add(layout.RegistryConfigFile, string(b)+"\n", 0o644)
	return files, modes, nil
}

func applyRegistry(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
	files, modes, err := registryFiles(c)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	changed := false
	if issuesRegistryCert(c) {
		w, err := ensureRegistryCert(h, c, registryPKIDir+"/registry.pem", registryPKIDir+"/registry-key.pem")
		if err != nil {
			return err
		}
		changed = w
	}
	for _, p := range paths {
		w, err := h.WriteIfChanged(p, []byte(files[p]), modes[p])
		if err != nil {
			return err
		}
		changed = changed || w
	}
	if !changed {
		return nil
	}
	// The registry re-reads its config on restart; containerd reads
	// hosts.toml on every pull. On a first boot the registry has not
	// started yet (its unit waits for its config): this starts it.
	return h.Run(ctx, "systemctl", "restart", "terrarium-registry.service")
}

func verifyRegistry(ctx context.Context, h *host.Host, c *machineconfig.Config) error {
	files, _, err := registryFiles(c)
	if err != nil {
		return err
	}
	if err := h.FilesMatch(files); err != nil {
		return err
	}
	if issuesRegistryCert(c) {
		if err := registryCertMisfit(h, c); err != nil {
			return fmt.Errorf("the registry's certificate does not fit the cluster CA and address: %w", err)
		}
	}
	return nil
}

// registryCertMisfit says why the issued certificate needs replacing, or
// returns nil when it fits, without replacing it.
func registryCertMisfit(h *host.Host, c *machineconfig.Config) error {
	ca, err := x509CA(c)
	if err != nil {
		return err
	}
	ap, err := netip.ParseAddrPort(c.Registry.Listen)
	if err != nil {
		return err
	}
	return registryCertFits(h, registryPKIDir+"/registry.pem", registryPKIDir+"/registry-key.pem", ca, ap.Addr())
}
