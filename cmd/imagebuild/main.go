// Command imagebuild builds Terrarium images and config disks.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{Use: "imagebuild", Short: "Build Terrarium appliance images and config disks", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(buildCmd(), configCmd(), bundleCmd(), componentsCmd(), osCmd(), runCmd(), upgradeCmd(), secureBootCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}
