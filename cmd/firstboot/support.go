package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/ops/support"
)

func supportCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "support",
		Short: "Write a support bundle (journal, node state, unit logs, pods, registry and balancer state), secrets redacted",
		Long: "Writes one archive, terrarium-support-<host>-<time>.tar.gz, to --dir: what a vendor needs to see why a node misbehaves, " +
			"with every secret field of the node's config redacted (machineconfig.Fields lists them, Ignition's file contents and password hashes included). Inserting a stick labelled TERRA-SUPPORT " +
			"into a running node writes the same archive to the stick.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			path, sum, err := support.WriteFile(cmd.Context(), host.Real(), dir, support.Options{})
			if err != nil {
				return err
			}
			fmt.Printf("%s: %d files, %d redactions\n", path, len(sum.Files), sum.Redactions)
			if n := len(sum.Failed()); n > 0 {
				fmt.Printf("%d of them record an error instead of their content (see index.txt)\n", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "/var/lib/terrarium/support", "the directory to write the archive to (created if missing)")
	return cmd
}
