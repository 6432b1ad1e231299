package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

func inPlaceCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "in-place SLOT",
		Short: "Run slot SLOT's Kubernetes in place until the next boot (terrarium-in-place@SLOT.service runs it)",
		Long: "Mounts slot SLOT read-only at " + layout.InPlaceSlotDir + ", binds its kubelet, kubeadm and kubectl over the\n" +
			"running slot's and names it in " + layout.RunInPlaceSlot + ", on the host, until the next boot. firstboot\n" +
			"starts it when an upgrade it staged changes nothing but Kubernetes (docs/operations/upgrades.md).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot := layout.Slot(args[0])
			if !slot.Valid() {
				return fmt.Errorf("in-place %q: no such slot (a or b)", args[0])
			}
			return firstboot.NewInPlaceDisk(host.Real(), nil).Switch(cmd.Context(), slot)
		},
	}
}
