package main

import (
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
)

func resetCmd() *cobra.Command {
	var yes, noReboot bool
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Erase TERRA-STATE on the next boot: the node forgets its enrollment and enrolls again",
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := firstboot.ResetOptions{Root: "/", In: os.Stdin, Out: os.Stdout, Yes: yes, Now: time.Now,
				Reboot: func(ctx context.Context) error { return exec.CommandContext(ctx, "systemctl", "reboot").Run() }}
			if noReboot {
				o.Reboot = nil
			}
			return firstboot.Reset(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&noReboot, "no-reboot", false, "only record the request; the reset happens at the next boot")
	return cmd
}
