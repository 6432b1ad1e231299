package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kubeletpki"
	"github.com/terrarium-os/terrarium/pkg/node/unpackwindow"
)

func repairKubeletCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "repair-kubelet",
		Short: "Before the kubelet starts: remove or point back its certificates a power cut tore",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := kubeletpki.Repair(host.Real(), firstboot.Consoles{SysActive: "/sys/class/tty/console/active"})
			return err
		},
	}
}

func repairImagesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "repair-images",
		Short: "Before containerd starts: drop its store if the last boot was cut while it unpacked images",
		RunE: func(cmd *cobra.Command, _ []string) error {
			removed, err := unpackwindow.Repair(host.Real(), firstboot.Consoles{SysActive: "/sys/class/tty/console/active"})
			if err != nil {
				return err
			}
			if removed {
				fmt.Println("removed containerd's store: the last boot was cut while it unpacked images")
			}
			return nil
		},
	}
}

func closeUnpackWindowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "close-unpack-window",
		Short: "At shutdown, once containerd has stopped: sync what it unpacked and close the image unpack window (terrarium-unpack-window.service)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := unpackwindow.CloseAtShutdown(cmd.Context(), host.Real(), firstboot.Consoles{SysActive: "/sys/class/tty/console/active"})
			return err
		},
	}
}
