// Package clusterconfig turns a cluster topology and the cluster's secrets
// into one machine config per node, signed with the cluster's config
// signing key: what `imagebuild config cluster` writes to each node's
// config disk. The same topology and secrets always give the same configs
// and signatures, byte for byte.
package clusterconfig

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Node is one machine of the topology.
type Node struct {
	Hostname string
	IP       netip.Addr
	// MAC, if set, selects the node's cluster link by hardware address
	// (machines with several NICs); otherwise Topology.Interface does.
	MAC string
}

// Topology describes the cluster's machines and networks.
type Topology struct {
	// ControlPlanes are the control-plane machines, the init node first.
	ControlPlanes []Node
	Workers       []Node
	// PrefixLength of the node network (e.g. 24).
	PrefixLength int
	// Interface matches the node's cluster link by name (glob allowed).
	Interface string
	// Gateway and DNS are optional: an air-gapped cluster needs neither.
	Gateway string
	DNS     []string
	// PodCIDR and ServiceCIDR; empty means the defaults.
	PodCIDR, ServiceCIDR string
	// Admin is the login user of every node (SSH keys only); nil for none.
	Admin *machineconfig.Admin
	// IgnorePreflightErrors: kubeadm preflight checks every node reports
	// as warnings (see machineconfig.Cluster).
	IgnorePreflightErrors []string
	// PodSecurity are the cluster's Pod Security admission levels, in the
	// control planes' configs; nil leaves them out (the defaults,
	// machineconfig.DefaultPodSecurity).
	PodSecurity *machineconfig.PodSecurity
	// NoLocalStorage leaves the cluster without the local-path
	// StorageClass (machineconfig.LocalStorage.Disabled on every node).
	NoLocalStorage bool
	// NoMetrics leaves the cluster without metrics-server
	// (machineconfig.Metrics.Disabled on every node).
	NoMetrics bool
	// BackupVolumes opts every node's local volumes into its backups
	// (machineconfig.Backup.VolumesPassphrase, each node's own, derived
	// from the cluster CA's key).
	BackupVolumes bool
	// LoadBalancer are the address ranges (FIRST-LAST or CIDR) MetalLB
	// gives Services of type LoadBalancer on the cluster's link
	// (machineconfig.LoadBalancer on every node); none: no MetalLB.
	LoadBalancer []string
	// StateEncryption is what every node requires of its TERRA-STATE
	// (machineconfig.State.Encryption): "tpm" makes a node without an
	// encrypted one refuse its config and wait; "" leaves it to each
	// machine.
	StateEncryption string
}

// Role of node i in the ordered list ControlPlanes+Workers.
func (t *Topology) nodes() []struct {
	Node
	Role string
} {
	var out []struct {
		Node
		Role string
	}
	for i, n := range t.ControlPlanes {
		role := machineconfig.RoleControlPlane
		if i == 0 {
			role = machineconfig.RoleInit
		}
		out = append(out, struct {
			Node
			Role string
		}{n, role})
	}
	for _, n := range t.Workers {
		out = append(out, struct {
			Node
			Role string
		}{n, machineconfig.RoleWorker})
	}
	return out
}

// Check reports what is wrong with the topology.
func (t *Topology) Check() error {
	var problems []string
	if len(t.ControlPlanes) == 0 {
		problems = append(problems, "no control-plane node: name at least one with --control-plane NAME=IP (the first one forms the cluster)")
	}
	if t.PrefixLength <= 0 || t.PrefixLength > 32 {
		problems = append(problems, fmt.Sprintf("prefix length %d is not 1-32", t.PrefixLength))
	}
	names, ips := map[string]bool{}, map[netip.Addr]bool{}
	var first netip.Prefix
	for i, n := range t.nodes() {
		if names[n.Hostname] {
			problems = append(problems, fmt.Sprintf("hostname %s is used twice", n.Hostname))
		}
		names[n.Hostname] = true
		if !n.IP.Is4() {
			problems = append(problems, fmt.Sprintf("%s: %s is not an IPv4 address", n.Hostname, n.IP))
			continue
		}
		if ips[n.IP] {
			problems = append(problems, fmt.Sprintf("%s: IP %s is used twice", n.Hostname, n.IP))
		}
		ips[n.IP] = true
		p := netip.PrefixFrom(n.IP, t.PrefixLength).Masked()
		if i == 0 {
			first = p
		} else if p != first && t.PrefixLength > 0 {
			problems = append(problems, fmt.Sprintf("%s: %s is outside the cluster subnet %s", n.Hostname, n.IP, first))
		}
	}
	for _, s := range t.LoadBalancer {
		r, err := machineconfig.ParseAddressRange(s)
		if err != nil {
			problems = append(problems, fmt.Sprintf("--load-balancer %v", err))
			continue
		}
		for _, n := range t.nodes() {
			if r.Contains(n.IP) {
				problems = append(problems, fmt.Sprintf("--load-balancer %s holds %s's address %s; leave the nodes' addresses out of the pool", s, n.Hostname, n.IP))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("cluster topology:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// Configs renders one machine config per node, in topology order (control
// planes, then workers). Every config is parsed back, so what is returned
// is valid. Each lists the cluster's signing key in trustedKeys for configs
// and bundles, so that an enrolled node accepts a later config, and a
// side-load bundle, signed with it (OS upgrades stay with the keys the
// image was built to trust); s must have one
// (clustersecrets.ErrNoSigningKey otherwise). Each config has the
// secrets' generation (1 until a rotation raises it).
func Configs(t *Topology, s *clustersecrets.Secrets) ([]*machineconfig.Config, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	hash, err := s.CACertHash()
	if err != nil {
		return nil, err
	}
	signer, err := s.SigningPublicKey()
	if err != nil {
		return nil, err
	}
	var cps []string
	for _, n := range t.ControlPlanes {
		cps = append(cps, n.IP.String())
	}
	// Every node derives its recovery key against the escrow's public
	// half (secrets from before there was one: none).
	var recovery string
	if s.RecoveryKey != "" {
		e, err := s.RecoveryEscrow()
		if err != nil {
			return nil, err
		}
		recovery = e.Public().String()
	}
	var out []*machineconfig.Config
	for _, n := range t.nodes() {
		c := &machineconfig.Config{
			APIVersion: machineconfig.APIVersion,
			Kind:       machineconfig.Kind,
			Generation: s.Generation(),
			Hostname:   n.Hostname,
			Network: machineconfig.Network{Interfaces: []machineconfig.Interface{{
				Name:       t.Interface,
				MACAddress: n.MAC,
				Addresses:  []string{netip.PrefixFrom(n.IP, t.PrefixLength).String()},
				Gateway:    t.Gateway,
				DNS:        t.DNS,
			}}},
			Admin:       t.Admin,
			TrustedKeys: []machineconfig.TrustedKey{machineconfig.TrustKey(signer, machineconfig.PurposeConfig, machineconfig.PurposeBundle)},
			Cluster: &machineconfig.Cluster{
				Name:          s.ClusterName,
				Role:          n.Role,
				NodeIP:        n.IP.String(),
				ControlPlanes: cps,
				PodCIDR:       t.PodCIDR,
				ServiceCIDR:   t.ServiceCIDR,
				Token:         s.Token(),
				TokenExpires:  s.BootstrapToken.Expires,
				CACert:        s.CA.Cert,
				CACertHash:    hash,

				IgnorePreflightErrors: t.IgnorePreflightErrors,
			},
			Registry: registry(n.Role, n.IP, t.ControlPlanes, s.CA.Cert),
		}
		if n.Role != machineconfig.RoleWorker {
			c.Cluster.PKI = &machineconfig.ClusterPKI{
				CAKey:          s.CA.Key,
				FrontProxyCA:   machineconfig.KeyPair{Cert: s.FrontProxyCA.Cert, Key: s.FrontProxyCA.Key},
				EtcdCA:         machineconfig.KeyPair{Cert: s.EtcdCA.Cert, Key: s.EtcdCA.Key},
				ServiceAccount: machineconfig.KeyPair{Cert: s.ServiceAccount.Pub, Key: s.ServiceAccount.Key},
				CertificateKey: s.CertificateKey,
			}
			// Only the API servers encrypt and admit; workers never
			// hold the key.
			c.Cluster.SecretsEncryptionKey = s.SecretsEncryptionKey
			c.Cluster.RetiredSecretsEncryptionKeys = s.RetiredSecretsEncryptionKeys
			c.Cluster.PodSecurity = t.PodSecurity
		}
		if t.NoLocalStorage {
			c.Cluster.LocalStorage = &machineconfig.LocalStorage{Disabled: true}
		}
		if t.NoMetrics {
			c.Cluster.Metrics = &machineconfig.Metrics{Disabled: true}
		}
		if t.BackupVolumes {
			pass, err := backup.VolumesPassphrase([]byte(s.CA.Key), s.ClusterName, n.Hostname)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n.Hostname, err)
			}
			c.Cluster.Backup = &machineconfig.Backup{VolumesPassphrase: pass}
		}
		if len(t.LoadBalancer) > 0 {
			c.Cluster.LoadBalancer = &machineconfig.LoadBalancer{Addresses: slices.Clone(t.LoadBalancer)}
		}
		if t.StateEncryption != "" || recovery != "" {
			c.State = &machineconfig.State{Encryption: t.StateEncryption, RecoveryKey: recovery}
		}
		if n.MAC != "" {
			c.Network.Interfaces[0].Name = ""
		}
		data, err := c.Marshal()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Hostname, err)
		}
		parsed, err := machineconfig.Parse(n.Hostname+".yaml", data)
		if err != nil {
			return nil, fmt.Errorf("generated config of %s is invalid: %w", n.Hostname, err)
		}
		out = append(out, parsed)
	}
	return out, nil
}

// registry: control planes serve their images to the cluster over TLS
// (the certificate is issued on the node from the cluster CA) and every
// node falls back to the control planes for images it lacks.
func registry(role string, ip netip.Addr, cps []Node, caCert string) *machineconfig.Registry {
	r := &machineconfig.Registry{CA: caCert}
	if role != machineconfig.RoleWorker {
		r.Serve = true
		r.Listen = netip.AddrPortFrom(ip, machineconfig.DefaultRegistryPort).String()
	}
	for _, cp := range cps {
		if cp.IP != ip {
			r.Peers = append(r.Peers, netip.AddrPortFrom(cp.IP, machineconfig.DefaultRegistryPort).String())
		}
	}
	return r
}
