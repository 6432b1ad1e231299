package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

func upgradeCmd() *cobra.Command {
	o := firstboot.UpgradeOptions{Out: os.Stdout, Poll: time.Second}
	cmd := &cobra.Command{
		Use:   "upgrade FILE|DEVICE",
		Short: "Install an upgrade file into the other slot and reboot into it on trial",
		Long: `Asks the running node to install an upgrade file (terrarium-VERSION.upgrade), or
the one upgrade file on a block device's filesystem, exactly as a TERRA-UPGRADE
stick would: the signature and every part are checked before anything is
written; the other slot and its boot entry are written with a boot counter;
the node reboots into it on trial, keeps it once it is healthy, and falls back
to this slot otherwise. A downgrade, the same version again, or an upgrade that
rolled back on this node before is refused unless forced; an incompatible one
always is.

On a node of a cluster the upgrade rolls out to every node instead. A forced
rollout needs a force instruction signed by a key the nodes trust for upgrades
beside the file (FILE.force, written on the build host by imagebuild upgrade
force --key KEY FILE); the instruction alone forces, with or without --force.
--force without one installs on this node alone, and only when the cluster's
API is out of reach.`,
		Example: `  sudo firstboot upgrade /home/admin/terrarium-0.2.0.upgrade
  sudo firstboot upgrade --no-reboot /dev/sdb1
  # a cluster, forced: terrarium-0.1.9.upgrade.force beside the file
  sudo firstboot upgrade /home/admin/terrarium-0.1.9.upgrade`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Host, o.Path = host.Real(), args[0]
			_, err := firstboot.RequestUpgrade(cmd.Context(), o)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Force, "force", false, "install a downgrade, the same version again, or an upgrade that rolled back here before "+
		"(a cluster forces only with FILE.force, a signed force instruction, beside the file)")
	f.BoolVar(&o.NoReboot, "no-reboot", false, "install only; the next boot tries the new slot")
	f.DurationVar(&o.Wait, "timeout", 30*time.Minute, "how long to wait for the node's answer")
	cmd.AddCommand(upgradeStatusCmd())
	return cmd
}

func upgradeStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show this node's upgrades and, on a cluster node, the cluster's rollout node by node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := host.Real()
			return firstboot.UpgradeStatus(cmd.Context(), firstboot.UpgradeStatusOptions{Host: h, API: firstboot.Defaults(slog.New(slog.NewTextHandler(os.Stderr, nil))).Rollout.API, Out: os.Stdout})
		},
	}
}
