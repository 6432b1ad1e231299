package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/testvm/vmrun"
)

func runCmd() *cobra.Command {
	var o vmrun.Options
	var noNet bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Boot an image in QEMU (UEFI, TCG) with config disks, console on this terminal",
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Network = !noNet
			if o.Dir == "" {
				o.Dir = filepath.Join("out", "vm", filepath.Base(o.Image))
			}
			return vmrun.Run(cmd.Context(), o, os.Stdin, os.Stdout)
		},
	}
	cmd.Flags().StringVar(&o.Image, "image", "out/terrarium.qcow2", "image to boot (not modified: the machine writes to an overlay)")
	cmd.Flags().StringArrayVar(&o.Configs, "config", nil, "config disk image to attach (repeatable)")
	cmd.Flags().StringVar(&o.DiskSize, "disk-size", "8G", "size of the machine's disk (TERRA-STATE fills it)")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "machine directory; reuse it to boot the same machine again (default out/vm/<image>)")
	cmd.Flags().BoolVar(&noNet, "no-network", false, "no NIC (default: a private network with no route out)")
	cmd.Flags().StringVar(&o.Capture, "capture", "", "write the machine's network traffic to this pcap file")
	return cmd
}
