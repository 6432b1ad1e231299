package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/firstboot"
)

func runCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Provision (first boot) or verify (later boots) this machine, then bless the boot",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return firstboot.Run(cmd.Context(), firstboot.Defaults(log))
		},
	}
}
