package clusterconfig

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/cluster/kubeconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// WriteOptions say what `imagebuild config cluster` writes.
type WriteOptions struct {
	Topology    Topology
	ClusterName string
	// SecretsPath is loaded when it exists, and generated otherwise.
	SecretsPath string
	// OutDir receives <hostname>.yaml and <hostname>.img per node.
	OutDir   string
	TokenTTL time.Duration
	// RotateToken replaces the bootstrap token of existing secrets.
	RotateToken bool
	// RotateSecretsEncryptionKey replaces the secrets encryption key of
	// existing secrets, keeps the old one as retired and raises the
	// configs' generation.
	RotateSecretsEncryptionKey bool
	Now                        time.Time
	// AdminTTL is the lifetime of the operator's kubeconfig,
	// admin.kubeconfig in OutDir (kubeconfig.DefaultTTL when zero).
	AdminTTL time.Duration
}

// Written is what Write wrote.
type Written struct {
	SecretsPath    string
	SecretsCreated bool
	TokenRotated   bool
	// SecretsEncryptionKeyRotated is set when Write rotated the secrets
	// encryption key.
	SecretsEncryptionKeyRotated bool
	// Generation is the generation of the configs written.
	Generation uint64
	// SigningKeyAdded is set when the secrets file predated the config
	// signing key and Write added one to it.
	SigningKeyAdded bool
	// SecretsEncryptionKeyAdded is set when the secrets file predated the
	// secrets encryption key and Write added one to it.
	SecretsEncryptionKeyAdded bool
	// RecoveryKeyAdded is set when the secrets file predated the
	// recovery escrow key: Write added one and saved the file.
	RecoveryKeyAdded bool
	TokenExpires     time.Time
	CACertHash       string
	// SigningKey is the public half of the key every config is signed with.
	SigningKey signature.PublicKey
	Nodes      []WrittenNode
	// Kubeconfig is the operator's admin kubeconfig, pointing at the
	// first control plane, and AdminExpires when it stops working.
	Kubeconfig   string
	AdminExpires time.Time
}

// WrittenNode is one node's outputs.
type WrittenNode struct {
	Hostname, Role, IP string
	// Config is <hostname>.yaml, Signature its detached signature
	// <hostname>.yaml.sig, and Disk the config disk holding both.
	Config, Signature, Disk string
}

// Write loads or creates the cluster secrets, renders every node's
// machine config and writes it, with its signature by the cluster's config
// signing key and a config disk holding both, to OutDir. Secrets from
// before the signing key or the secrets encryption key get one, and are
// saved with it. The secrets file
// is written 0600. Each output is written whole or not at all
// (configdisk and the secrets write temporary files and rename them).
func Write(o WriteOptions) (*Written, error) {
	w := &Written{SecretsPath: o.SecretsPath}
	s, err := clustersecrets.Load(o.SecretsPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s, err = clustersecrets.Generate(o.ClusterName, o.Now, o.TokenTTL, nil)
		if err != nil {
			return nil, fmt.Errorf("generate cluster secrets: %w", err)
		}
		w.SecretsCreated = true
	case err != nil:
		return nil, err
	case o.ClusterName != "" && s.ClusterName != o.ClusterName:
		return nil, fmt.Errorf("%s holds the secrets of cluster %q, not %q; use another --secrets file for a new cluster", o.SecretsPath, s.ClusterName, o.ClusterName)
	case o.RotateToken:
		if err := s.RotateToken(o.Now, o.TokenTTL, nil); err != nil {
			return nil, fmt.Errorf("rotate token: %w", err)
		}
		w.TokenRotated = true
	}
	if w.SigningKeyAdded, err = s.EnsureSigningKey(nil); err != nil {
		return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
	}
	if w.SecretsEncryptionKeyAdded, err = s.EnsureSecretsEncryptionKey(nil); err != nil {
		return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
	}
	if w.RecoveryKeyAdded, err = s.EnsureRecoveryKey(nil); err != nil {
		return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
	}
	if o.RotateSecretsEncryptionKey && !w.SecretsCreated && !w.SecretsEncryptionKeyAdded {
		if err := s.RotateSecretsEncryptionKey(nil); err != nil {
			return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
		}
		w.SecretsEncryptionKeyRotated = true
	}
	if err := s.CheckExpiry(o.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
	}
	cfgs, err := Configs(&o.Topology, s)
	if err != nil {
		return nil, err
	}
	key, err := s.SigningPrivateKey()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
	}
	if w.SecretsCreated || w.TokenRotated || w.SigningKeyAdded || w.SecretsEncryptionKeyAdded || w.SecretsEncryptionKeyRotated || w.RecoveryKeyAdded {
		if err := clustersecrets.Save(o.SecretsPath, s); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.OutDir, err)
	}
	for _, c := range cfgs {
		n, err := writeNode(o.OutDir, c, key)
		if err != nil {
			return nil, err
		}
		w.Nodes = append(w.Nodes, n)
	}
	if err := w.writeKubeconfig(o, s, cfgs); err != nil {
		return nil, err
	}
	w.TokenExpires = s.BootstrapToken.Expires
	w.Generation = s.Generation()
	w.CACertHash, _ = s.CACertHash()
	w.SigningKey = signature.PublicKeyOf(key)
	return w, nil
}

// writeKubeconfig mints the operator's kubeconfig for the first control
// plane.
func (w *Written) writeKubeconfig(o WriteOptions, s *clustersecrets.Secrets, cfgs []*machineconfig.Config) error {
	ttl := o.AdminTTL
	if ttl == 0 {
		ttl = kubeconfig.DefaultTTL
	}
	var server string
	for _, c := range cfgs {
		if c.Cluster.Role != machineconfig.RoleWorker {
			server = "https://" + net.JoinHostPort(c.Cluster.NodeIP, strconv.Itoa(machineconfig.APIServerPort))
			break
		}
	}
	m, err := kubeconfig.Admin(s, kubeconfig.Options{Server: server, User: kubeconfig.DefaultUser, TTL: ttl, Now: o.Now})
	if err != nil {
		return fmt.Errorf("operator kubeconfig: %w", err)
	}
	w.Kubeconfig, w.AdminExpires = filepath.Join(o.OutDir, AdminKubeconfig), m.NotAfter
	return atomicfile.WriteFile(w.Kubeconfig, m.Data, 0o600)
}

// AdminKubeconfig is the operator's kubeconfig in the output directory.
const AdminKubeconfig = "admin.kubeconfig"

// writeNode writes c as <hostname>.yaml, its signature by key as
// <hostname>.yaml.sig, and a config disk holding both as <hostname>.img.
func writeNode(dir string, c *machineconfig.Config, key ed25519.PrivateKey) (WrittenNode, error) {
	data, err := c.Marshal()
	if err != nil {
		return WrittenNode{}, err
	}
	sig := signature.Sign(key, data)
	config := filepath.Join(dir, c.Hostname+".yaml")
	n := WrittenNode{Hostname: c.Hostname, Role: c.Cluster.Role, IP: c.Cluster.NodeIP,
		Config: config, Signature: config + signature.FileSuffix, Disk: filepath.Join(dir, c.Hostname+".img")}
	// Configs of control planes carry CA keys: owner-only, like the secrets.
	if err := atomicfile.WriteFile(n.Config, data, 0o600); err != nil {
		return WrittenNode{}, err
	}
	if err := atomicfile.WriteFile(n.Signature, sig, 0o644); err != nil {
		return WrittenNode{}, err
	}
	if err := configdisk.WriteSigned(n.Disk, data, sig); err != nil {
		return WrittenNode{}, fmt.Errorf("config disk of %s: %w", c.Hostname, err)
	}
	if err := os.Chmod(n.Disk, 0o600); err != nil {
		return WrittenNode{}, err
	}
	return n, nil
}
