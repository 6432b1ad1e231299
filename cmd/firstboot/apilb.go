package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/node/kube/apilb"
)

func apilbCmd() *cobra.Command {
	var config string
	cmd := &cobra.Command{
		Use:   "apilb",
		Short: "Balance the Kubernetes API over the control planes on 127.0.0.1 (the systemd service terrarium-apilb)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := apilb.LoadFile(config)
			if err != nil {
				return err
			}
			cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			b, err := apilb.New(cfg)
			if err != nil {
				return err
			}
			return b.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&config, "config", apilb.ConfigFile, "balancer configuration (written by firstboot)")
	return cmd
}
