package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/cluster/configsign"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

func configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Machine configs and config disks"}
	var specPath string
	var ignPath string
	validate := &cobra.Command{
		Use:   "validate MACHINE.yaml",
		Short: "Check a machine config and list every problem",
		Long: "Check a machine config and list every problem, including those of the image it lands on: " +
			"its link naming (the kernel command line of --spec; without it, the default image's predictable names), " +
			"and its Ignition part (its ignition: field, or the file of --ignition) as the node checks it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return validateConfig(args[0], specPath, ignPath)
		},
	}
	validate.Flags().StringVar(&specPath, "spec", "", "the build spec of the image the config lands on")
	validate.Flags().StringVar(&ignPath, "ignition", "", ignitionFlagUsage)
	cmd.AddCommand(configDiskCmd(), validate, configSignCmd(), configKeygenCmd(), clusterConfigCmd(), kubeconfigCmd(), backupKeyCmd(), backupOpenCmd(), recoveryKeyCmd())
	return cmd
}

// ignitionFlagUsage says what --ignition takes.
const ignitionFlagUsage = "the node's Ignition part, from an Ignition config (JSON, spec 3.0 to 3.5), " +
	"a Butane config (.bu, variant fcos or flatcar) or a Container Linux Config (Flatcar's ct YAML)"

func configDiskCmd() *cobra.Command {
	var out, key, ignPath string
	cmd := &cobra.Command{
		Use:   "disk MACHINE.yaml [--ignition CONFIG]",
		Short: "Validate a machine config and write it, signed with --sign, to a TERRA-CONFIG disk image",
		Long: `Validates a machine config and writes it to a TERRA-CONFIG disk image, signed
with --sign. Its Ignition part (files, directories, links, users, groups and
systemd units the node applies after its own phases) is the config's own
ignition: field, or the file --ignition names, which may be:

  - an Ignition config: JSON, spec 3.0.0 to 3.5.0, taken as it is;
  - a Butane config (variant: fcos, versions 1.0.0 to 1.6.0, or variant:
    flatcar, 1.0.0 and 1.1.0), translated as butane does; its local: files and
    trees are read from the Butane file's directory;
  - a Container Linux Config (Flatcar's YAML for ct), transpiled to Ignition 2.3
    as ct does and converted to 3.0 with ign-converter.

The kind is told from the content. The result goes on the disk as the machine
config's ignition: field. Everything is checked as the node checks it before
it applies anything: the translator's own report, and what Terrarium does not
apply (storage.disks, raid, filesystems, luks, kernel arguments, remote
sources, passwords; a CLC's etcd, flannel, docker, update, locksmith and
networkd) is refused by name, each problem at its file, line and column.`,
		Example: `  imagebuild config disk -o node-1.img machine.yaml
  imagebuild config disk -o node-1.img --ignition node-1.bu machine.yaml
  imagebuild config disk -o node-1.img --ignition flatcar.clc.yaml --sign node.key machine.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts []configsign.DiskOption
			if ignPath != "" {
				opts = append(opts, configsign.WithIgnition(ignPath))
			}
			cfg, signed, err := configsign.WriteDisk(args[0], out, key, opts...)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s for %s (%s)\n", out, cfg.Hostname, cfg.Digest())
			if signed != nil {
				printSigned(signed)
			}
			fmt.Printf("  attach it to QEMU, or write it to a USB stick: dd if=%s of=/dev/sdX bs=1M\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "config.img", "config disk image to write")
	cmd.Flags().StringVar(&key, "sign", "", "sign the config with this key (a .key file from config keygen, or a cluster's secrets file) and put the signature on the disk")
	cmd.Flags().StringVar(&ignPath, "ignition", "", ignitionFlagUsage)
	return cmd
}

func configSignCmd() *cobra.Command {
	var key, previous string
	cmd := &cobra.Command{
		Use:   "sign --key KEY MACHINE.yaml",
		Short: "Validate a machine config and write its signature, MACHINE.yaml.sig, beside it",
		Long: `Signs a changed machine config for a node that is already enrolled: the node
accepts it only with a signature by a key listed in trustedKeys of the config
it runs trusts for configs, and only when its generation is above the highest
the node applied (so an old stick cannot bring an old config back). KEY is a
.key file from 'imagebuild config keygen' or, for cluster nodes, the cluster's
secrets file. A config without a generation is refused; --previous names the
config the node runs now, and the new one must be above its generation. The
signature covers the file's exact bytes: sign again after any edit.`,
		Example: `  imagebuild config sign --key node.key machine.yaml
  imagebuild config sign --key lab/secrets.yaml --previous lab/w-1.old.yaml lab/w-1.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			signed, err := configsign.SignFile(args[0], key, previous)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s\n", signed.SignaturePath)
			printSigned(signed)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "signing key: a .key file from config keygen, or a cluster's secrets file")
	cmd.Flags().StringVar(&previous, "previous", "", "the config the node runs now: the new config's generation must be above its")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

func printSigned(s *configsign.Signed) {
	fmt.Printf("  signed with key %s (%s)\n", s.Key.ID(), s.Key)
	fmt.Printf("  generation %d: a node takes it only when it applied no higher generation\n", s.Config.Generation)
	if !s.KeyTrusted {
		fmt.Println("  note: the config does not trust this key for configs: the node's next change must be signed with a key it does")
	}
}

func configKeygenCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "keygen -o NAME",
		Short: "Make a config signing key for standalone nodes: NAME.key (private) and NAME.pub",
		Long: `Writes NAME.key (the private key, mode 0600: keep it safe) and NAME.pub (the
public key). Put the line of NAME.pub in trustedKeys of a node's first config;
later changes of its config must then be signed with
'imagebuild config sign --key NAME.key'. Cluster nodes use the cluster's key,
made by 'imagebuild config cluster'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kf, err := configsign.Keygen(name)
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s (private: keep it safe) and %s\n  key %s: %s\n  add it to the node's config:\n    trustedKeys:\n      - %s\n",
				kf.PrivatePath, kf.PublicPath, kf.Key.ID(), kf.Key, kf.Key)
			return nil
		},
	}
	cmd.Flags().StringVarP(&name, "out", "o", "", "name of the key files to write: NAME.key and NAME.pub")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// validateConfig checks a machine config alone and against the image a
// build spec makes, with its Ignition part: its own, or the file at
// ignPath when that is not "".
func validateConfig(path, specPath, ignPath string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	c, err := machineconfig.Parse(path, data)
	if err != nil {
		return err
	}
	if ignPath != "" {
		_, c, err = configsign.AddIgnition(path, c, ignPath)
	} else {
		err = configsign.CheckIgnition(path, data, c)
	}
	if err != nil {
		return err
	}
	var cmdline string
	if specPath != "" {
		s, err := spec.Parse(specPath)
		if err != nil {
			return err
		}
		cmdline = strings.Join(s.Kernel.Cmdline, " ")
	}
	if err := machineconfig.CheckLinkNaming(c, cmdline); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Println(path + ": valid")
	return nil
}
