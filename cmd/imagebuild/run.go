package main

import "github.com/spf13/cobra"

func runCmd() *cobra.Command {
	return &cobra.Command{Use: "run", Short: "Boot an image in QEMU (see pkg/qemu)", Hidden: true}
}
