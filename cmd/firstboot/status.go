package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

func statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this node's status (the console banner)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := os.ReadFile(status.File)
			if err != nil {
				return fmt.Errorf("no status yet (is terrarium-firstboot.service running?): %w", err)
			}
			if asJSON {
				_, err = os.Stdout.Write(data)
				return err
			}
			var s status.Status
			if err := json.Unmarshal(data, &s); err != nil {
				return fmt.Errorf("parse %s: %w", status.File, err)
			}
			fmt.Print(status.Banner(s))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print status.json as is")
	return cmd
}
