package main

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
)

func stickServiceCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "stick-service",
		Short:  "Mount one stick a job of the node writes to, in a sandbox of its own, on the connection on standard input (the socket-activated systemd service terrarium-stick@)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := net.FileConn(os.Stdin)
			if err != nil {
				return fmt.Errorf("the connection on standard input: %w", err)
			}
			conn, ok := c.(*net.UnixConn)
			if !ok {
				return fmt.Errorf("standard input is a %T, not a Unix socket: this is terrarium-stick@.service's program, started by terrarium-stick.socket", c)
			}
			defer conn.Close()
			return (&media.StickService{Dir: dir}).Serve(cmd.Context(), conn)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", layout.StickMountDir, "where to mount the stick, in the service's own mount namespace")
	return cmd
}
