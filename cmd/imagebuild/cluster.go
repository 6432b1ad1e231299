package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/cluster/clusterconfig"
	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/cluster/kubeconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

func clusterConfigCmd() *cobra.Command {
	var (
		o            clusterconfig.WriteOptions
		cps, workers []string
		sshKeys      []string
		adminName    string
		podSecurity  string
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Generate a cluster's secrets and one machine config and config disk per node",
		Long: `Generates (or reuses) the cluster's secrets — cluster, front-proxy and etcd CAs,
the service-account key, a bootstrap token, the certificate key, the config
signing key, the key Secrets are encrypted with in etcd — and writes a machine config, its signature (NODE.yaml.sig) and a
TERRA-CONFIG disk holding both for every node. Boot every node from the same
image with its own disk, in any order: they form the cluster by themselves.
Every node trusts the signing key: sign a later config change with
'imagebuild config sign --key SECRETS NODE.yaml'.

Re-running with the same --secrets file reproduces the same node configs.`,
		Example: `  imagebuild config cluster --name lab --interface 'en*' --prefix-length 24 \
    --control-plane cp-1=10.77.0.10 --worker w-1=10.77.0.20 --ssh-key ~/.ssh/id_ed25519.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Topology.ControlPlanes, err = parseNodes("--control-plane", cps); err != nil {
				return err
			}
			if o.Topology.Workers, err = parseNodes("--worker", workers); err != nil {
				return err
			}
			if podSecurity != "" {
				if o.Topology.PodSecurity, err = machineconfig.ParsePodSecurity(podSecurity); err != nil {
					return fmt.Errorf("--pod-security: %w", err)
				}
			}
			if len(sshKeys) > 0 {
				a := &machineconfig.Admin{Name: adminName}
				for _, f := range sshKeys {
					b, err := os.ReadFile(f)
					if err != nil {
						return fmt.Errorf("--ssh-key: %w", err)
					}
					for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
						if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
							a.SSHAuthorizedKeys = append(a.SSHAuthorizedKeys, l)
						}
					}
				}
				o.Topology.Admin = a
			}
			if o.SecretsPath == "" {
				o.SecretsPath = filepath.Join(o.OutDir, "secrets.yaml")
			}
			o.Now = time.Now().UTC().Truncate(time.Second)
			w, err := clusterconfig.Write(o)
			if err != nil {
				return err
			}
			switch {
			case w.SecretsCreated:
				fmt.Printf("secrets: created %s (mode 0600). It holds the cluster's CA keys and join token: keep it private, and keep it to add nodes later.\n", w.SecretsPath)
			case w.TokenRotated:
				fmt.Printf("secrets: %s: new bootstrap token\n", w.SecretsPath)
			default:
				fmt.Printf("secrets: reused %s\n", w.SecretsPath)
			}
			if w.SigningKeyAdded {
				fmt.Printf("secrets: %s had no config signing key (made before there was one): added one and saved it.\n", w.SecretsPath)
			}
			if w.SecretsEncryptionKeyRotated {
				fmt.Printf("secrets: %s: new secrets encryption key; the old one is kept as retired. The configs are generation %d:\n"+
					"  bring each control plane its new config (a TERRA-CONFIG stick of its .img); once every control plane has it,\n"+
					"  they rewrite every Secret with the new key and stop using the old one (docs/security.md#rotating-the-key).\n", w.SecretsPath, w.Generation)
			}
			if w.SecretsEncryptionKeyAdded {
				fmt.Printf("secrets: %s had no secrets encryption key (made before there was one): added one and saved it.\n"+
					"  A cluster formed from these configs encrypts its Secrets in etcd; one already formed keeps them as they are.\n", w.SecretsPath)
			}
			if w.RecoveryKeyAdded {
				fmt.Printf("secrets: %s had no recovery escrow key (made before there was one): added one and saved it.\n"+
					"  Nodes enrolled from these configs derive their TERRA-STATE recovery keys against it (imagebuild config recovery-key);\n"+
					"  nodes enrolled before keep the recovery key they showed on their console.\n", w.SecretsPath)
			}
			fmt.Printf("CA hash %s; bootstrap token expires %s\n", w.CACertHash, w.TokenExpires.Format(time.RFC3339))
			fmt.Printf("configs signed with key %s (%s), which every node trusts: sign later changes with\n  imagebuild config sign --key %s NODE.yaml\n\n",
				w.SigningKey.ID(), w.SigningKey, w.SecretsPath)
			fmt.Printf("  %-16s %-13s %-15s %s\n", "NODE", "ROLE", "IP", "CONFIG DISK")
			for _, n := range w.Nodes {
				fmt.Printf("  %-16s %-13s %-15s %s\n", n.Hostname, n.Role, n.IP, n.Disk)
			}
			fmt.Printf("\nOperator kubeconfig: %s (cluster admin, valid until %s; mint another with\n  imagebuild config kubeconfig --secrets %s --server https://IP:%d)\n",
				w.Kubeconfig, w.AdminExpires.Format(time.RFC3339), w.SecretsPath, machineconfig.APIServerPort)
			fmt.Println("\nConfig disks of control-plane nodes carry the CA keys: handle them like the secrets file.")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ClusterName, "name", machineconfig.DefaultClusterName, "cluster name")
	f.StringArrayVar(&cps, "control-plane", nil, "a control-plane node as NAME=IP[@MAC] (repeat; the first forms the cluster; @MAC picks its cluster NIC)")
	f.StringArrayVar(&workers, "worker", nil, "a worker node as NAME=IP[@MAC] (repeat)")
	f.IntVar(&o.Topology.PrefixLength, "prefix-length", 24, "prefix length of the node network")
	f.StringVar(&o.Topology.Interface, "interface", "en*", "the nodes' cluster link, by name or glob")
	f.StringVar(&o.Topology.Gateway, "gateway", "", "default gateway (none: the cluster network is isolated)")
	f.StringSliceVar(&o.Topology.DNS, "dns", nil, "DNS servers for the nodes (none needed)")
	f.StringVar(&o.Topology.PodCIDR, "pod-cidr", "", "pod network (default "+machineconfig.DefaultPodCIDR+")")
	f.StringVar(&o.Topology.ServiceCIDR, "service-cidr", "", "service network (default "+machineconfig.DefaultServiceCIDR+")")
	f.StringSliceVar(&o.Topology.IgnorePreflightErrors, "ignore-preflight-errors", nil, "kubeadm preflight checks to report as warnings on every node (e.g. NumCPU for 1-CPU lab control planes)")
	f.StringVar(&podSecurity, "pod-security", "", "Pod Security admission levels as MODE=LEVEL pairs, MODE enforce, audit or warn, LEVEL privileged, baseline or restricted (default "+machineconfig.DefaultPodSecurity().String()+")")
	f.BoolVar(&o.Topology.NoLocalStorage, "no-local-storage", false, "leave the cluster without its default StorageClass (local-path: volumes on each node's TERRA-STATE)")
	f.BoolVar(&o.Topology.NoMetrics, "no-metrics", false, "leave the cluster without its resource metrics API (metrics-server: kubectl top, autoscaling on CPU and memory)")
	f.BoolVar(&o.Topology.BackupVolumes, "backup-volumes", false, "carry each node's local volumes in its backups: a TERRA-BACKUP stick inserted into any node receives them, encrypted to that node's own passphrase (docs/operations/backup.md)")
	f.StringSliceVar(&o.Topology.LoadBalancer, "load-balancer", nil, "addresses MetalLB gives Services of type LoadBalancer, announced on the cluster's link: FIRST-LAST or CIDR (repeat or comma-separate; default none, no MetalLB)")
	f.StringVar(&o.Topology.StateEncryption, "state-encryption", "", "what every node requires of its TERRA-STATE: tpm (encrypted, its key sealed by the machine's TPM; a node without one refuses its config and waits) or none (accept it plain); default: encrypted where the machine has a TPM (docs/state-encryption.md)")
	f.StringArrayVar(&sshKeys, "ssh-key", nil, "authorized_keys file for the admin user (repeat)")
	f.StringVar(&adminName, "admin", machineconfig.DefaultAdminName, "admin user name")
	f.StringVar(&o.SecretsPath, "secrets", "", "cluster secrets file, reused when it exists (default OUT/secrets.yaml)")
	f.StringVarP(&o.OutDir, "out", "o", "cluster", "directory for the node configs and disks")
	f.DurationVar(&o.TokenTTL, "token-ttl", 24*time.Hour, "lifetime of a new bootstrap token")
	f.BoolVar(&o.RotateToken, "rotate-token", false, "replace the bootstrap token of existing secrets")
	f.BoolVar(&o.RotateSecretsEncryptionKey, "rotate-secrets-key", false, "replace the key Secrets are encrypted with in etcd (the old one is kept as retired) and raise the configs' generation")
	f.DurationVar(&o.AdminTTL, "admin-ttl", kubeconfig.DefaultTTL, "lifetime of the operator's kubeconfig (OUT/"+clusterconfig.AdminKubeconfig+")")
	return cmd
}

func kubeconfigCmd() *cobra.Command {
	var (
		secretsPath, out string
		o                kubeconfig.Options
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Mint a cluster-admin kubeconfig for the operator's machine from the cluster's secrets",
		Long: `Mints a kubeconfig whose client certificate, signed by the cluster CA, makes
its holder a cluster admin (group kubeadm:cluster-admins) until it expires.
'imagebuild config cluster' writes one (OUT/admin.kubeconfig); this mints
another, with its own lifetime, without touching anything else.`,
		Example: `  imagebuild config kubeconfig --secrets cluster/secrets.yaml --server https://10.77.0.10:6443 --ttl 8h -o ops.kubeconfig
  kubectl --kubeconfig ops.kubeconfig get nodes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secretsPath == "" || o.Server == "" || out == "" {
				return errors.New("give --secrets (the cluster's secrets file), --server (https://IP:6443 of a control plane) and -o (the kubeconfig to write)")
			}
			s, err := clustersecrets.Load(secretsPath)
			if err != nil {
				return err
			}
			o.Now = time.Now().UTC().Truncate(time.Second)
			m, err := kubeconfig.Admin(s, o)
			if err != nil {
				return err
			}
			if err := atomicfile.WriteFile(out, m.Data, 0o600); err != nil {
				return err
			}
			fmt.Printf("wrote %s: %s is a cluster admin of %q at %s until %s\n", out, o.User, s.ClusterName, o.Server, m.NotAfter.Format(time.RFC3339))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&secretsPath, "secrets", "", "the cluster's secrets file")
	f.StringVar(&o.Server, "server", "", "the API server, https://IP:6443 of a control plane")
	f.StringVar(&o.User, "user", kubeconfig.DefaultUser, "the user name the cluster sees")
	f.DurationVar(&o.TTL, "ttl", kubeconfig.DefaultTTL, "how long the kubeconfig works")
	f.StringVarP(&out, "out", "o", "", "the kubeconfig to write (mode 0600)")
	return cmd
}

// parseNodes reads NAME=IP values.
func parseNodes(flag string, vals []string) ([]clusterconfig.Node, error) {
	var out []clusterconfig.Node
	for _, v := range vals {
		name, rest, ok := strings.Cut(v, "=")
		ip, mac, _ := strings.Cut(rest, "@")
		addr, err := netip.ParseAddr(ip)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("%s %q: write NAME=IP or NAME=IP@MAC, like cp-1=10.77.0.10", flag, v)
		}
		out = append(out, clusterconfig.Node{Hostname: name, IP: addr, MAC: mac})
	}
	return out, nil
}
