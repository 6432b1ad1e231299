package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
)

func runCmd() *cobra.Command {
	var phase string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Enroll, provision (first boot) or verify (later boots) this machine, bless the boot, then watch for signed config changes",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			o := firstboot.Defaults(log)
			if phase != "" {
				o.Console = os.Stdout
				return firstboot.RunPhase(cmd.Context(), o, phase)
			}
			return firstboot.Run(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&phase, "phase", "", "run only this phase against the stored config (hostname, network, admin-user, registry-mirrors, kubernetes-host, ...), or one kubeadm step of the node's role (kubernetes/init-phase-certs-all, ...; a wrong name lists them)")
	return cmd
}
