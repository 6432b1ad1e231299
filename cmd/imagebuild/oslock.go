package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

func osCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "os", Short: "The root filesystem's Debian packages"}
	var specPath string
	lock := &cobra.Command{
		Use:   "lock",
		Short: "Resolve os.packages in the archive as it is today and write the exact .deb files to the spec's os.lock",
		Long: "Runs mmdebstrap's minbase resolution of the spec's os.packages against its mirror and writes " +
			"every .deb file (package, version, file, sha256) to the file the spec's os.lock names. " +
			"A build with that lock installs exactly these files on any day.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := spec.Parse(specPath)
			if err != nil {
				return err
			}
			if s.OS.Lock == "" {
				return errors.New(specPath + ": os.lock names no file to write the lock to; add e.g. `lock: terrarium.lock.yaml` under os")
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			l, err := rootfs.LockOS(cmd.Context(), s.OS, log)
			if err != nil {
				return err
			}
			path := s.Resolve(s.OS.Lock)
			if err := rootfs.WriteOSLock(path, l); err != nil {
				return err
			}
			fmt.Printf("%s: %d .deb files for %d requested packages (%s, %s)\n", path, len(l.Lock), len(l.Packages), l.Suite, l.Mirror)
			return nil
		},
	}
	lock.Flags().StringVarP(&specPath, "spec", "f", "os/terrarium.yaml", "build spec file")
	cmd.AddCommand(lock)
	return cmd
}
