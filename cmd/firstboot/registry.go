package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryd"
)

func registryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "registry",
		Short: "Serve the image's bundle and the node's cache (the systemd service terrarium-registry)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			console := firstboot.Consoles{SysActive: "/sys/class/tty/console/active"}
			return registryd.Run(cmd.Context(), registryd.Defaults(log, console))
		},
	}
}
