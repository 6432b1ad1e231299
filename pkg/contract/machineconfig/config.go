// Package machineconfig defines the Terrarium machine config, the
// machine.yaml a node reads from an attached disk on first boot to set its
// hostname, network and admin user, and parses and validates it.
//
// A complete example (version v1alpha1):
//
//	apiVersion: terrarium.dev/v1alpha1
//	kind: MachineConfig
//	hostname: node-1
//	network:
//	  interfaces:
//	    - name: enp0s2
//	      addresses: [10.0.0.10/24, fd00::10/64]
//	      gateway: 10.0.0.1
//	      dns: [10.0.0.1]
//	    - macAddress: 52:54:00:12:34:56
//	      dhcp: true
//	admin:
//	  name: admin
//	  sshAuthorizedKeys:
//	    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... alice@laptop
//	trustedKeys:
//	  - ed25519:Ls0m7fU3V1... # signs later changes of this config
//
// There is deliberately no password field: the appliance does not allow
// password logins, only SSH keys.
package machineconfig

const (
	// APIVersion is the only apiVersion this package reads and writes.
	APIVersion = "terrarium.dev/v1alpha1"
	// Kind is the kind of a machine config document.
	Kind = "MachineConfig"
	// DefaultAdminName is the admin user's name when admin.name is not set.
	DefaultAdminName = "admin"
)

// Config is a machine config. Parse it with Parse, which also applies
// defaults and validates it.
type Config struct {
	// APIVersion must be APIVersion.
	APIVersion string `yaml:"apiVersion"`
	// Kind must be Kind.
	Kind string `yaml:"kind"`
	// Generation numbers the config's versions: a signed change must carry
	// a generation above the highest the node applied, or the node refuses
	// it as replayed (an old stick must not bring back an old config).
	// Optional on a first config; `imagebuild config cluster` starts at 1.
	Generation uint64 `yaml:"generation,omitempty"`
	// Hostname is the node's name: an RFC 1123 DNS label (1-63 characters
	// of a-z, 0-9 and '-', not starting or ending with '-'). Required.
	Hostname string `yaml:"hostname"`
	// Network is the network configuration. When it lists no interfaces,
	// the node configures no network.
	Network Network `yaml:"network,omitempty"`
	// Admin is the login user. When nil, the node has no login user.
	Admin *Admin `yaml:"admin,omitempty"`
	// TrustedKeys are the public keys, each "ed25519:<base64>" (the .pub
	// file of `imagebuild config keygen`), the node takes signed inputs
	// from, each for its purposes (TrustedKey): a bare key signs config
	// changes only; {key, purposes: [config, bundle, upgrade]} names more.
	// Once enrolled, the node accepts a different config only with a
	// detached signature (machine.yaml.sig, see package signature) by a
	// key its current config trusts for configs; a node that trusts any
	// key takes side-load bundles only when signed by a key trusted for
	// bundles. For cluster nodes, `imagebuild config cluster` puts the
	// cluster's signing key here. Empty: the node's config can only be
	// changed by re-enrolling it.
	TrustedKeys []TrustedKey `yaml:"trustedKeys,omitempty"`
	// Registry configures the node's registry cache; absent, the node
	// serves its own images on loopback only.
	Registry *Registry `yaml:"registry,omitempty"`
	// Cluster makes the node a Kubernetes node; absent, it runs no
	// Kubernetes.
	Cluster *Cluster `yaml:"cluster,omitempty"`
	// Ignition is an Ignition v3 config (JSON, in a YAML block scalar)
	// applied after the node's own phases: files, directories, links,
	// users, groups and systemd units. It is validated whole before
	// anything is applied (pkg/contract/ignitionspec, on the build host and
	// the node); here it must be a JSON object.
	Ignition string `yaml:"ignition,omitempty"`
	// Install, on a node booted live from the ISO, installs Terrarium onto
	// the disk it selects and reboots into it; a node running from a disk
	// ignores it.
	Install *Install `yaml:"install,omitempty"`
	// State tunes how the node uses TERRA-STATE; absent, the defaults.
	State *State `yaml:"state,omitempty"`
}

// Network is the network configuration of a node.
type Network struct {
	// Interfaces configure network links. Each link is configured by the
	// first entry that matches it; links no entry matches stay down.
	Interfaces []Interface `yaml:"interfaces,omitempty"`
}

// Interface configures the network link(s) it matches. Exactly one of Name
// and MACAddress selects the link(s).
type Interface struct {
	// Name matches links by kernel interface name. It is either a literal
	// name ("enp0s2") or a shell-style glob in path.Match syntax ("en*",
	// "eth[0-3]"), which matches every link whose name it matches.
	Name string `yaml:"name,omitempty"`
	// MACAddress matches the link with this hardware address, written as
	// six colon-separated hex bytes (52:54:00:12:34:56, any case).
	MACAddress string `yaml:"macAddress,omitempty"`
	// DHCP enables DHCPv4 on the link. When false, Addresses is required.
	DHCP bool `yaml:"dhcp"`
	// Addresses are static IPv4 or IPv6 addresses in CIDR form
	// (10.0.0.10/24, fd00::10/64), in addition to any DHCP lease.
	Addresses []string `yaml:"addresses,omitempty"`
	// Gateway is the default gateway, an IP address inside the subnet of
	// one of Addresses. At most one interface may set an IPv4 gateway, and
	// at most one an IPv6 gateway. Optional.
	Gateway string `yaml:"gateway,omitempty"`
	// DNS lists name server IP addresses. Optional.
	DNS []string `yaml:"dns,omitempty"`
}

// Admin is the login user.
type Admin struct {
	// Name is the user name: ^[a-z_][a-z0-9_-]{0,31}$ and not a name the
	// system uses (root, daemon, nobody, systemd-*, ...). Defaults to
	// DefaultAdminName.
	Name string `yaml:"name"`
	// SSHAuthorizedKeys are the public keys allowed to log in, in
	// authorized_keys format without options: "<type> <base64> [comment]".
	// At least one is required.
	SSHAuthorizedKeys []string `yaml:"sshAuthorizedKeys"`
}

// Example returns a new copy of a minimal valid config: hostname
// "terrarium" and DHCP on every link whose name starts with "en". It has no
// admin user, as there is no key that could sensibly be shipped in one.
func Example() *Config {
	return &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Hostname:   "terrarium",
		Network: Network{Interfaces: []Interface{
			{Name: "en*", DHCP: true},
		}},
	}
}
