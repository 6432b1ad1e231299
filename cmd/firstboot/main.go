// Command firstboot is Terrarium's on-appliance orchestrator.
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
	root := &cobra.Command{Use: "firstboot", Short: "Terrarium's first-boot orchestrator", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(runCmd(), statusCmd(), registryCmd(), apilbCmd(), repairImagesCmd(), closeUnpackWindowCmd(), repairKubeletCmd(), resetCmd(), supportCmd(), upgradeCmd(), backupCmd(), snapshotterCmd(), removeNodeCmd(), cisBenchmarkCmd(), stickServiceCmd(), inPlaceCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "firstboot:", err)
		os.Exit(1)
	}
}
