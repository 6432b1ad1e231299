package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/firstboot"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/unpackwindow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeletpki"
)

func repairKubeletCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "repair-kubelet",
		Short: "Before the kubelet starts: remove or point back its certificates a power cut tore, make its serving pair if it has none, and start a patch upgrade's control plane on the slot's Kubernetes",
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := host.Real()
			if _, err := kubeletpki.Repair(h, firstboot.Consoles{SysActive: "/sys/class/tty/console/active"}); err != nil {
				return err
			}
			name, err := os.Hostname()
			if err != nil {
				return fmt.Errorf("the kubelet's serving certificate: %w", err)
			}
			if _, err = kubeletpki.EnsureServing(h, strings.ToLower(name)); err != nil {
				return err
			}
			// A speed-up, never a reason for the kubelet not to start:
			// kubeadm's upgrade moves what this leaves.
			did, err := kubeadmflow.PrestartControlPlane(cmd.Context(), h, "")
			switch {
			case err != nil:
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "terrarium: the control plane starts on its configured Kubernetes, for kubeadm to upgrade: %v\n", err)
			case did != "":
				_, _ = fmt.Fprintf(cmd.OutOrStdout(), "terrarium: %s\n", did)
			}
			return nil
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
