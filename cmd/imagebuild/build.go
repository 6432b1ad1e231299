package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/terrarium-os/terrarium/pkg/image/build"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

func buildCmd() *cobra.Command {
	var specPath, out, cacheDir, cacheMax, firstbootBin, initBin, prefer string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build an image (raw, qcow2, manifest.json) from a build spec",
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := spec.Parse(specPath)
			if err != nil {
				return err
			}
			limit, err := cache.ParseMax(cacheMax)
			if err != nil {
				return err
			}
			c, err := cache.New(cacheDir)
			if err != nil {
				return err
			}
			defer c.Close() //nolint:errcheck // releases read-only locks
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			res, err := build.Run(cmd.Context(), s, build.Inputs{Firstboot: firstbootBin, Init: initBin}, build.Options{
				OutDir: out, Cache: c, Progress: os.Stderr, PreferSource: prefer, CacheMax: limit,
				Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
			})
			if err != nil {
				return err
			}
			fmt.Printf("\n%s\n", res.Map)
			for f, o := range res.Manifest.Outputs {
				fmt.Printf("  %-6s %s  %4d MiB  sha256:%s\n", f, filepath.Join(out, o.File), o.Size>>20, o.SHA256)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&specPath, "spec", "f", "os/terrarium.yaml", "build spec file")
	cmd.Flags().StringVarP(&out, "out", "o", "out", "output directory")
	cmd.Flags().StringVar(&cacheDir, "cache", cache.DefaultDir(), "content-addressed cache ($"+cache.EnvDir+")")
	cmd.Flags().StringVar(&cacheMax, "cache-max", os.Getenv(cache.EnvMax), "after the build, remove the least recently used cache entries down to this size (20GiB when empty; off keeps all) ($"+cache.EnvMax+")")
	cmd.Flags().StringVar(&firstbootBin, "firstboot", besideSelf("firstboot"), "firstboot binary for the rootfs")
	cmd.Flags().StringVar(&initBin, "init", besideSelf("terrarium-init"), "initramfs /init binary")
	cmd.Flags().StringVar(&prefer, "prefer-source", "", "resolve bundle images from their alternative of this kind where they list one (registry: pull instead of build, on a connected host)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log each step")
	return cmd
}

// besideSelf is the path of a sibling binary (make builds them into bin/).
func besideSelf(name string) string {
	self, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(self), name)
}
