package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/images/imageseed"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryd"
	"github.com/terrarium-os/terrarium/pkg/node/images/snapshotter"
)

func snapshotterCmd() *cobra.Command {
	var root, layers, socket string
	cmd := &cobra.Command{
		Use:   "snapshotter",
		Short: "Serve containerd's snapshots, the slot's bundled layers straight from the slot (the systemd service terrarium-snapshotter)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			sn, err := snapshotter.New(root, layers, log)
			if err != nil {
				return err
			}
			defer sn.Close()
			// A snapshot Reconcile could not repair fails its containers,
			// not the node: the snapshotter serves regardless.
			res, err := sn.Reconcile(cmd.Context(), snapshotter.MountOtherSlot("/proc/cmdline", "/dev/disk/by-partlabel", "/run/terrarium/other-slot"))
			if err != nil {
				log.Error("snapshotter: reconcile the slot's layers", "err", err)
			}
			if len(res.Kept)+len(res.Relinked)+len(res.Missing)+len(res.Pruned) > 0 {
				log.Info("snapshotter: the slot's layers reconciled", "kept on STATE", res.Kept, "relinked", res.Relinked,
					"missing", res.Missing, "pruned", res.Pruned)
			}
			// Before containerd starts (it waits for this service): the
			// slot's bundled images, registered in its store.
			start := time.Now()
			opts := imageseed.NodeOptions(sn)
			opts.SlotLayers = layers
			seeded, err := imageseed.Seed(cmd.Context(), opts)
			if err != nil {
				log.Error("snapshotter: register the slot's images in containerd's store (they are pulled instead)", "err", err)
			} else {
				log.Info("snapshotter: the slot's images registered in containerd's store", "seeded", len(seeded.Seeded),
					"present", len(seeded.Present), "skipped", seeded.Skipped, "took", time.Since(start).Round(time.Millisecond), "parts", seeded.Took.String())
			}
			log.Info("snapshotter: serving", "socket", socket, "root", root, "layers", layers)
			return snapshotter.Serve(cmd.Context(), sn, socket, registryd.Notify())
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", layout.SnapshotterRoot, "the snapshots (on TERRA-STATE)")
	f.StringVar(&layers, "layers", layout.SlotLayersDir, "the slot's unpacked layers")
	f.StringVar(&socket, "socket", layout.SnapshotterSocket, "where containerd connects")
	return cmd
}
