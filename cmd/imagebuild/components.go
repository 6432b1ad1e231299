package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/pins"
)

func componentsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "components", Short: "The pinned upstream components (components/versions.yaml)"}
	var dir, bundles, cacheDir string
	var offline bool
	check := &cobra.Command{
		Use:   "check",
		Short: "Check that the components' go.mod files, kubeadm's expectations and the Kubernetes bundle agree with the pins",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := pins.Load(dir)
			if err != nil {
				return err
			}
			if err := v.Check(cmd.Context(), dir); err != nil {
				return err
			}
			if err := v.CheckKubeadm(cmd.Context()); err != nil {
				return err
			}
			fmt.Printf("components agree with %s (Kubernetes %s)\n", filepath.Join(dir, pins.VersionsFile), v.Kubernetes)
			return nil
		},
	}
	pin := &cobra.Command{
		Use:   "pin",
		Short: "Align every component with versions.yaml, build the Kubernetes bundle's images and write it with their digests",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			v, err := pins.Load(dir)
			if err != nil {
				return err
			}
			if !offline {
				fmt.Println("aligning go.mod files (go mod tidy)...")
				if err := v.Sync(ctx, dir); err != nil {
					return err
				}
			}
			if err := v.Check(ctx, dir); err != nil {
				return err
			}
			if err := v.CheckKubeadm(ctx); err != nil {
				return fmt.Errorf("%w\nfix components/%s to what kubeadm expects", err, pins.VersionsFile)
			}
			c, err := cache.New(cacheDir)
			if err != nil {
				return err
			}
			defer c.Close() //nolint:errcheck // releases read-only locks
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			path, res, err := v.WriteBundle(ctx, dir, bundles, log,
				bundle.WithCacheDir(filepath.Join(cacheDir, "bundle-blobs")), bundle.WithArtifactCache(c), bundle.WithLogger(log))
			if err != nil {
				return err
			}
			for _, r := range res {
				fmt.Printf("  %-55s %s\n", r.Name, r.Digest)
			}
			fmt.Printf("wrote %s; a build spec uses it with `bundles: [%s]`\n", path, path)
			return nil
		},
	}
	for _, c := range []*cobra.Command{check, pin} {
		c.Flags().StringVar(&dir, "components", "components", "the components directory")
	}
	pin.Flags().StringVar(&bundles, "bundles", "bundles", "where the Kubernetes bundle is written")
	pin.Flags().StringVar(&cacheDir, "cache", cache.DefaultDir(), "content-addressed cache")
	pin.Flags().BoolVar(&offline, "offline", false, "do not touch go.mod files (they must already agree)")
	cmd.AddCommand(check, pin)
	return cmd
}
