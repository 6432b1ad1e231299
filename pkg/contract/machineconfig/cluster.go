package machineconfig

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/backup"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// Cluster roles.
const (
	// RoleInit forms the cluster: kubeadm init on the first control plane.
	RoleInit = "init"
	// RoleControlPlane joins as another control-plane (and etcd) member.
	RoleControlPlane = "controlplane"
	// RoleWorker joins as a worker.
	RoleWorker = "worker"
)

// Cluster defaults.
const (
	DefaultClusterName = "terrarium"
	DefaultPodCIDR     = "10.244.0.0/16"
	DefaultServiceCIDR = "10.96.0.0/12"
	// APIServerPort is where kube-apiserver listens on control-plane nodes.
	APIServerPort = 6443
	// LocalAPIPort is the node-local API balancer's port on 127.0.0.1.
	LocalAPIPort = 7445
)

// Cluster makes the node a member of a Kubernetes cluster. `imagebuild
// config cluster` writes it; every node of a cluster gets the same
// secrets' public parts, and control-plane nodes the CA keys as well, so
// that all can boot at once: no node waits for another to hand it anything
// but a running API.
type Cluster struct {
	// Name of the cluster (a DNS label). Default "terrarium".
	Name string `yaml:"name,omitempty"`
	// Role is init (exactly one node), controlplane or worker.
	Role string `yaml:"role"`
	// NodeIP is this node's address on the cluster network: one of its
	// static addresses.
	NodeIP string `yaml:"nodeIP"`
	// ControlPlanes are the IPs of every control-plane node, the init node
	// first. Nodes address the API by these IPs only (no DNS, no VIP).
	ControlPlanes []string `yaml:"controlPlanes"`
	// PodCIDR and ServiceCIDR are the cluster's address ranges.
	PodCIDR     string `yaml:"podCIDR,omitempty"`
	ServiceCIDR string `yaml:"serviceCIDR,omitempty"`
	// Token is the bootstrap token (id.secret) nodes join with, valid
	// until TokenExpires.
	Token        string    `yaml:"token"`
	TokenExpires time.Time `yaml:"tokenExpires"`
	// CACert is the cluster CA certificate (PEM) and CACertHash its
	// public key's hash (sha256:<hex>), which pins discovery.
	CACert     string `yaml:"caCert"`
	CACertHash string `yaml:"caCertHash"`
	// PKI holds the CA keys; control-plane nodes (init and controlplane)
	// only.
	PKI *ClusterPKI `yaml:"pki,omitempty"`
	// SecretsEncryptionKey is the key the control planes encrypt Secrets
	// with in etcd (secretbox): 32 random bytes, standard base64.
	// Control-plane nodes only; `imagebuild config cluster` keeps it with
	// the cluster's secrets. Absent: Secrets are stored in plain text
	// (configs made before there was a key).
	SecretsEncryptionKey string `yaml:"secretsEncryptionKey,omitempty"`
	// RetiredSecretsEncryptionKeys are the keys the cluster used before
	// SecretsEncryptionKey, newest first (`imagebuild config cluster
	// --rotate-secrets-key` moves the current key here). kube-apiserver
	// reads Secrets with them until every Secret is rewritten with the
	// current key, then no longer (pkg/node/kube/secretskeys); a restore
	// of a backup taken before a rotation needs them again. Control-plane
	// nodes only.
	RetiredSecretsEncryptionKeys []string `yaml:"retiredSecretsEncryptionKeys,omitempty"`
	// PodSecurity are the cluster's Pod Security admission levels, set by
	// the control planes. Absent: DefaultPodSecurity.
	PodSecurity *PodSecurity `yaml:"podSecurity,omitempty"`
	// IgnorePreflightErrors are kubeadm preflight checks reported as
	// warnings instead of stopping the node (kubeadm's check names, e.g.
	// NumCPU for a control plane with one CPU in a lab). Empty: every
	// check but SystemVerification (which reads the running kernel's
	// config, absent from an appliance kernel) is enforced.
	IgnorePreflightErrors []string `yaml:"ignorePreflightErrors,omitempty"`
	// Backup schedules a control plane's etcd snapshots on TERRA-STATE
	// and says whether the node's backups carry its local volumes
	// (docs/operations/backup.md). Absent: every DefaultBackupInterval,
	// the newest DefaultBackupKeep kept, no volumes.
	Backup *Backup `yaml:"backup,omitempty"`
	// LocalStorage is the cluster's default StorageClass (local-path):
	// whether the cluster has it, and this node's volume area. Absent:
	// the cluster has it, each node's area sized by default
	// (LocalStorage.AreaSize).
	LocalStorage *LocalStorage `yaml:"localStorage,omitempty"`
	// Metrics is the cluster's resource metrics API (metrics-server).
	// Absent: the cluster has it.
	Metrics *Metrics `yaml:"metrics,omitempty"`
	// LoadBalancer gives Services of type LoadBalancer addresses on the
	// cluster's link (MetalLB, L2). Absent: the cluster has no
	// LoadBalancer addresses.
	LoadBalancer *LoadBalancer `yaml:"loadBalancer,omitempty"`
}

// Backup is a control plane's etcd snapshot schedule, and the node's
// volume backups.
type Backup struct {
	// Interval between two snapshots, a Go duration (30m, 6h), from
	// MinBackupInterval to MaxBackupInterval. Control planes only.
	Interval string `yaml:"interval,omitempty"`
	// Keep is how many snapshots stay on STATE (1 to MaxBackupKeep).
	// Control planes only.
	Keep int `yaml:"keep,omitempty"`
	// VolumesPassphrase opts the node's local volumes into its backups:
	// a TERRA-BACKUP stick then receives them too, encrypted to this
	// passphrase, and a new node of this name restores them from one
	// (backup.VolumesPassphrase: derived from the cluster CA's key for
	// this node; imagebuild config cluster --backup-volumes writes it).
	VolumesPassphrase string `yaml:"volumesPassphrase,omitempty"`
}

// VolumesBackupPassphrase is the passphrase of the node's volume backups;
// "" when its backups carry no volumes.
func (c *Cluster) VolumesBackupPassphrase() string {
	if c == nil || c.Backup == nil {
		return ""
	}
	return c.Backup.VolumesPassphrase
}

// The etcd snapshot schedule's defaults and bounds.
const (
	DefaultBackupInterval = time.Hour
	DefaultBackupKeep     = 24
	MinBackupInterval     = 5 * time.Minute
	MaxBackupInterval     = 7 * 24 * time.Hour
	MaxBackupKeep         = 1000
)

// BackupSchedule is the control plane's snapshot interval and how many
// snapshots it keeps, defaults filled in.
func (c *Cluster) BackupSchedule() (interval time.Duration, keep int) {
	interval, keep = DefaultBackupInterval, DefaultBackupKeep
	if c.Backup == nil {
		return interval, keep
	}
	if d, err := time.ParseDuration(c.Backup.Interval); err == nil && c.Backup.Interval != "" {
		interval = d
	}
	if c.Backup.Keep > 0 {
		keep = c.Backup.Keep
	}
	return interval, keep
}

func validateBackup(ps *strictyaml.Problems, p strictyaml.Path, c Cluster, hostname string) {
	b := *c.Backup
	if !c.IsControlPlane() && (b.Interval != "" || b.Keep != 0) {
		ps.Addf(p, "workers hold no etcd to back up; remove backup.interval and backup.keep from a worker's config")
	}
	if v := b.VolumesPassphrase; v != "" {
		switch {
		case !backup.IsVolumesPassphrase(v):
			ps.Addf(p.Field("volumesPassphrase"), "is not %s<32 bytes in base64url>; write it with imagebuild config cluster --backup-volumes", backup.VolumesPassphrasePrefix)
		case c.PKI != nil && c.PKI.CAKey != "":
			// A control plane can check it is this node's.
			want, err := backup.VolumesPassphrase([]byte(c.PKI.CAKey), c.Name, hostname)
			if err == nil && want != v {
				ps.Addf(p.Field("volumesPassphrase"), "is not the passphrase the cluster's CA key gives node %s: this config was edited or made for another node; regenerate it with imagebuild config cluster --backup-volumes", quote(hostname))
			}
		}
	}
	if b.Interval != "" {
		d, err := time.ParseDuration(b.Interval)
		switch {
		case err != nil:
			ps.Addf(p.Field("interval"), "%s is not a duration; write it like 30m or 6h", quote(b.Interval))
		case d < MinBackupInterval || d > MaxBackupInterval:
			ps.Addf(p.Field("interval"), "%s is outside %s to %s", b.Interval, MinBackupInterval, "168h")
		}
	}
	if b.Keep < 0 || b.Keep > MaxBackupKeep {
		ps.Addf(p.Field("keep"), "%d is outside 1 to %d (0 or absent keeps %d)", b.Keep, MaxBackupKeep, DefaultBackupKeep)
	}
}

// ClusterPKI is what control-plane nodes pre-seed /etc/kubernetes/pki with.
type ClusterPKI struct {
	CAKey          string  `yaml:"caKey"`
	FrontProxyCA   KeyPair `yaml:"frontProxyCA"`
	EtcdCA         KeyPair `yaml:"etcdCA"`
	ServiceAccount KeyPair `yaml:"serviceAccount"` // cert: sa.pub, key: sa.key
	// CertificateKey is kubeadm's key for the kubeadm-certs Secret; kept
	// for kubeadm join --control-plane flows that download certificates.
	CertificateKey string `yaml:"certificateKey,omitempty"`
}

// KeyPair is a PEM certificate (or public key) and its private key.
type KeyPair struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// IsControlPlane reports whether the role runs the control plane.
func (c *Cluster) IsControlPlane() bool { return c.Role == RoleInit || c.Role == RoleControlPlane }

// APIEndpoint is the node-local balanced API endpoint (host:port).
func (c *Cluster) APIEndpoint() string { return fmt.Sprintf("127.0.0.1:%d", LocalAPIPort) }

// APIBackends are the control planes' kube-apiserver addresses.
func (c *Cluster) APIBackends() []string {
	out := make([]string, len(c.ControlPlanes))
	for i, ip := range c.ControlPlanes {
		out[i] = netip.AddrPortFrom(netip.MustParseAddr(ip), APIServerPort).String()
	}
	return out
}

func (c *Cluster) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultClusterName
	}
	if c.PodCIDR == "" {
		c.PodCIDR = DefaultPodCIDR
	}
	if c.ServiceCIDR == "" {
		c.ServiceCIDR = DefaultServiceCIDR
	}
}

var (
	tokenRE  = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	caHashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// preflightRE: a kubeadm preflight check name (NumCPU,
	// FileAvailable--etc-kubernetes-manifests-etcd.yaml, Port-6443).
	preflightRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.-]*$`)
)

// CACertHash is kubeadm's discovery hash of a PEM CA certificate.
func CACertHash(certPEM string) (string, error) {
	b, _ := pem.Decode([]byte(certPEM))
	if b == nil || b.Type != "CERTIFICATE" {
		return "", fmt.Errorf("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// validateCluster checks the cluster section against itself and the
// node's network (n): what a config disk gets wrong is reported before
// anything is applied.
func validateCluster(ps *strictyaml.Problems, p strictyaml.Path, c Cluster, n Network, hostname string) {
	if !isLabel(c.Name) {
		ps.Addf(p.Field("name"), "%s is not a DNS label", quote(c.Name))
	}
	switch c.Role {
	case RoleInit, RoleControlPlane, RoleWorker:
	default:
		ps.Addf(p.Field("role"), "%s is not a role; use init (the one node that forms the cluster), controlplane or worker", quote(c.Role))
	}
	prefixes := staticPrefixes(n)
	node, err := netip.ParseAddr(c.NodeIP)
	switch {
	case err != nil:
		ps.Addf(p.Field("nodeIP"), "%s is not an IP address", quote(c.NodeIP))
	case !hasAddr(prefixes, node):
		ps.Addf(p.Field("nodeIP"), "%s is not one of this node's static addresses (%s); the cluster addresses nodes by IP", c.NodeIP, prefixList(prefixes))
	}
	cps := map[netip.Addr]bool{}
	if len(c.ControlPlanes) == 0 {
		ps.Addf(p.Field("controlPlanes"), "lists no control-plane IPs")
	}
	for i, s := range c.ControlPlanes {
		a, err := netip.ParseAddr(s)
		if err != nil {
			ps.Addf(p.Field("controlPlanes").Index(i), "%s is not an IP address", quote(s))
			continue
		}
		if cps[a] {
			ps.Addf(p.Field("controlPlanes").Index(i), "%s is listed twice", s)
		}
		cps[a] = true
		if !reachable(prefixes, n, a) {
			ps.Addf(p.Field("controlPlanes").Index(i), "%s is outside this node's subnets (%s) and no gateway is set: the node could not reach it", s, prefixList(prefixes))
		}
	}
	if err == nil && len(c.ControlPlanes) > 0 {
		switch {
		case c.Role == RoleInit && c.ControlPlanes[0] != c.NodeIP:
			ps.Addf(p.Field("role"), "init runs on the first control plane (%s), but nodeIP is %s", c.ControlPlanes[0], c.NodeIP)
		case c.Role == RoleControlPlane && !cps[node]:
			ps.Addf(p.Field("role"), "controlplane, but nodeIP %s is not among controlPlanes; the cluster cannot use this node as a control plane", c.NodeIP)
		case c.Role == RoleControlPlane && c.ControlPlanes[0] == c.NodeIP:
			ps.Addf(p.Field("role"), "controlplane, but %s is the first control plane, which is the init node's", c.NodeIP)
		case c.Role == RoleWorker && cps[node]:
			ps.Addf(p.Field("role"), "worker, but nodeIP %s is listed as a control plane", c.NodeIP)
		}
	}
	pod, perr := netip.ParsePrefix(c.PodCIDR)
	if perr != nil {
		ps.Addf(p.Field("podCIDR"), "%s is not a CIDR like %s", quote(c.PodCIDR), DefaultPodCIDR)
	}
	svc, serr := netip.ParsePrefix(c.ServiceCIDR)
	if serr != nil {
		ps.Addf(p.Field("serviceCIDR"), "%s is not a CIDR like %s", quote(c.ServiceCIDR), DefaultServiceCIDR)
	}
	if perr == nil && serr == nil && pod.Overlaps(svc) {
		ps.Addf(p.Field("serviceCIDR"), "%s overlaps podCIDR %s", c.ServiceCIDR, c.PodCIDR)
	}
	for _, np := range prefixes {
		if perr == nil && pod.Overlaps(np.Masked()) {
			ps.Addf(p.Field("podCIDR"), "%s overlaps the node network %s", c.PodCIDR, np.Masked())
		}
		if serr == nil && svc.Overlaps(np.Masked()) {
			ps.Addf(p.Field("serviceCIDR"), "%s overlaps the node network %s", c.ServiceCIDR, np.Masked())
		}
	}
	if !tokenRE.MatchString(c.Token) {
		ps.Addf(p.Field("token"), "is not a bootstrap token (6 and 16 characters of a-z0-9, joined by '.'); generate one with imagebuild config cluster")
	}
	if c.TokenExpires.IsZero() {
		ps.Addf(p.Field("tokenExpires"), "is required (RFC 3339)")
	}
	switch {
	case !caHashRE.MatchString(c.CACertHash):
		ps.Addf(p.Field("caCertHash"), "%s is not sha256:<64 hex digits>", quote(c.CACertHash))
	default:
		got, err := CACertHash(c.CACert)
		if err != nil {
			ps.Addf(p.Field("caCert"), "is not a PEM certificate: %v", err)
		} else if got != c.CACertHash {
			ps.Addf(p.Field("caCertHash"), "%s does not match caCert (its hash is %s): this disk was made for another cluster, or edited; regenerate it with imagebuild config cluster", c.CACertHash, got)
		}
	}
	for i, check := range c.IgnorePreflightErrors {
		switch {
		case strings.EqualFold(check, "all"):
			ps.Addf(p.Field("ignorePreflightErrors").Index(i), "all would hide every kubeadm preflight failure; name the checks to ignore (e.g. NumCPU)")
		case !preflightRE.MatchString(check):
			ps.Addf(p.Field("ignorePreflightErrors").Index(i), "%s is not a kubeadm preflight check name (like NumCPU or Mem)", quote(check))
		}
	}
	if c.IsControlPlane() {
		validatePKI(ps, p.Field("pki"), c)
	} else if c.PKI != nil {
		ps.Addf(p.Field("pki"), "workers carry no CA keys; remove pki from a worker's config")
	}
	validateHardening(ps, p, c)
	if c.LocalStorage != nil {
		validateLocalStorage(ps, p.Field("localStorage"), *c.LocalStorage)
	}
	if c.LoadBalancer != nil {
		validateLoadBalancer(ps, p.Field("loadBalancer"), c, prefixes)
	}
	if c.Backup != nil {
		validateBackup(ps, p.Field("backup"), c, hostname)
	}
}

func validatePKI(ps *strictyaml.Problems, p strictyaml.Path, c Cluster) {
	if c.PKI == nil {
		ps.Addf(p, "a %s node needs the cluster's CA keys (pki); regenerate its config with imagebuild config cluster", c.Role)
		return
	}
	pair := func(f strictyaml.Path, cert, key string) {
		if _, err := tls.X509KeyPair([]byte(cert), []byte(key)); err != nil {
			ps.Addf(f, "certificate and key do not form a pair: %v", err)
		}
	}
	pair(p.Field("caKey"), c.CACert, c.PKI.CAKey)
	pair(p.Field("frontProxyCA"), c.PKI.FrontProxyCA.Cert, c.PKI.FrontProxyCA.Key)
	pair(p.Field("etcdCA"), c.PKI.EtcdCA.Cert, c.PKI.EtcdCA.Key)
	if b, _ := pem.Decode([]byte(c.PKI.ServiceAccount.Key)); b == nil {
		ps.Addf(p.Field("serviceAccount").Field("key"), "holds no PEM private key")
	}
	if b, _ := pem.Decode([]byte(c.PKI.ServiceAccount.Cert)); b == nil {
		ps.Addf(p.Field("serviceAccount").Field("cert"), "holds no PEM public key")
	}
}

// CheckToken reports an expired bootstrap token: a node that still has to
// join cannot with it.
func (c *Cluster) CheckToken(now time.Time) error {
	if now.After(c.TokenExpires) {
		return fmt.Errorf("$.cluster.tokenExpires: the bootstrap token expired at %s (now %s); make a new one with imagebuild config cluster --rotate-token and write new config disks",
			c.TokenExpires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// staticPrefixes lists the node's static addresses with their subnets.
func staticPrefixes(n Network) []netip.Prefix {
	var out []netip.Prefix
	for _, ifc := range n.Interfaces {
		out = append(out, ifc.prefixes()...)
	}
	return out
}

// prefixes lists the interface's valid static addresses with their subnets.
func (i Interface) prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, a := range i.Addresses {
		if p, err := netip.ParsePrefix(a); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// HasAddress reports whether ip is one of the interface's static addresses.
func (i Interface) HasAddress(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && hasAddr(i.prefixes(), a)
}

func hasAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// reachable: a is on one of the node's subnets, or a gateway is set.
func reachable(ps []netip.Prefix, n Network, a netip.Addr) bool {
	for _, p := range ps {
		if p.Masked().Contains(a) {
			return true
		}
	}
	for _, ifc := range n.Interfaces {
		if ifc.Gateway != "" || ifc.DHCP {
			return true
		}
	}
	return false
}

func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		s += p.String()
	}
	return s
}
