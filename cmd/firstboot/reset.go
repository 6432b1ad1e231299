package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

func resetCmd() *cobra.Command {
	var yes, noReboot, eraseVolumes bool
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Erase TERRA-STATE on the next boot: the node forgets its enrollment and enrolls again",
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := host.Real()
			o := firstboot.ResetOptions{Host: h, In: os.Stdin, Out: os.Stdout, Yes: yes, EraseVolumes: eraseVolumes,
				Reboot: func(ctx context.Context) error { return h.Run(ctx, "systemctl", "reboot") }}
			if noReboot {
				o.Reboot = nil
			}
			return firstboot.Reset(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&eraseVolumes, "erase-volumes", false, "with --yes: erase the workloads' local volumes on this node too (asked separately without --yes)")
	cmd.Flags().BoolVar(&noReboot, "no-reboot", false, "only record the request; the reset happens at the next boot")
	return cmd
}
