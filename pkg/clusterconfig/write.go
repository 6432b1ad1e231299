package clusterconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/configdisk"
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
	Now         time.Time
}

// Written is what Write wrote.
type Written struct {
	SecretsPath    string
	SecretsCreated bool
	TokenRotated   bool
	TokenExpires   time.Time
	CACertHash     string
	Nodes          []WrittenNode
}

// WrittenNode is one node's outputs.
type WrittenNode struct {
	Hostname, Role, IP string
	Config, Disk       string
}

// Write loads or creates the cluster secrets, renders every node's
// machine config and writes it, with a config disk, to OutDir. The
// secrets file is written 0600. Each output is written whole or not at all
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
	if err := s.CheckExpiry(o.Now); err != nil {
		return nil, fmt.Errorf("%s: %w", o.SecretsPath, err)
	}
	cfgs, err := Configs(&o.Topology, s)
	if err != nil {
		return nil, err
	}
	if w.SecretsCreated || w.TokenRotated {
		if err := clustersecrets.Save(o.SecretsPath, s); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.OutDir, err)
	}
	for _, c := range cfgs {
		data, err := c.Marshal()
		if err != nil {
			return nil, err
		}
		n := WrittenNode{Hostname: c.Hostname, Role: c.Cluster.Role, IP: c.Cluster.NodeIP,
			Config: filepath.Join(o.OutDir, c.Hostname+".yaml"), Disk: filepath.Join(o.OutDir, c.Hostname+".img")}
		// Configs of control planes carry CA keys: owner-only, like the secrets.
		if err := writeFileAtomic(n.Config, data, 0o600); err != nil {
			return nil, err
		}
		if err := configdisk.Write(n.Disk, data); err != nil {
			return nil, fmt.Errorf("config disk of %s: %w", c.Hostname, err)
		}
		if err := os.Chmod(n.Disk, 0o600); err != nil {
			return nil, err
		}
		w.Nodes = append(w.Nodes, n)
	}
	w.TokenExpires = s.BootstrapToken.Expires
	w.CACertHash, _ = s.CACertHash()
	return w, nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".partial"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
