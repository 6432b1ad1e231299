package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/configdisk"
	"github.com/terrarium-os/terrarium/pkg/machineconfig"
)

func configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Machine configs and config disks"}
	var out string
	disk := &cobra.Command{
		Use:   "disk MACHINE.yaml",
		Short: "Validate a machine config and write it to a TERRA-CONFIG disk image",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			cfg, err := machineconfig.Parse(args[0], data)
			if err != nil {
				return err
			}
			if err := configdisk.Write(out, data); err != nil {
				return err
			}
			fmt.Printf("wrote %s for %s (%s)\n  attach it to QEMU, or write it to a USB stick: dd if=%s of=/dev/sdX bs=1M\n", out, cfg.Hostname, cfg.Digest(), out)
			return nil
		},
	}
	disk.Flags().StringVarP(&out, "out", "o", "config.img", "config disk image to write")
	validate := &cobra.Command{
		Use:   "validate MACHINE.yaml",
		Short: "Check a machine config and list every problem",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if _, err := machineconfig.Parse(args[0], data); err != nil {
				return err
			}
			fmt.Println(args[0] + ": valid")
			return nil
		},
	}
	cmd.AddCommand(disk, validate, clusterConfigCmd())
	return cmd
}
