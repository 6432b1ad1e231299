package registryd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"

	"github.com/terrarium-os/terrarium/pkg/node/registry"
	"golang.org/x/sys/unix"
)

// Labels of a side-load disk: ext4 and ISO 9660 hold the full name, FAT
// truncates it to 11 characters.
var bundleLabels = []string{layout.LabelBundle, layout.LabelBundleFAT}

// SideLoader adds bundles from disks labelled TERRA-BUNDLE, attached at
// boot or later, to the node's cache.
type SideLoader struct {
	LabelDir string // /dev/disk/by-label
	MountDir string // a private mount point
	Console  io.Writer
	Log      *slog.Logger
	Interval time.Duration
}

// Watch polls for bundle disks until ctx ends. Each disk (by device and
// size) is loaded once per boot.
func (s *SideLoader) Watch(ctx context.Context, cache *registry.Cache) {
	done := map[string]bool{}
	for {
		for _, label := range bundleLabels {
			dev := filepath.Join(s.LabelDir, label)
			id := diskID(dev)
			if id == "" || done[id] {
				continue
			}
			done[id] = true
			if err := s.load(ctx, dev, cache); err != nil {
				s.say("bundle disk %s rejected: %v", dev, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.Interval):
		}
	}
}

func diskID(dev string) string {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return ""
	}
	f, err := os.Open(real)
	if err != nil {
		return ""
	}
	defer f.Close()
	size, _ := f.Seek(0, io.SeekEnd)
	return fmt.Sprintf("%s:%d", real, size)
}

func (s *SideLoader) say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.Log.Info("registry: " + msg)
	if s.Console != nil {
		fmt.Fprintf(s.Console, "terrarium: %s\n", msg)
	}
}

func (s *SideLoader) load(ctx context.Context, dev string, cache *registry.Cache) error {
	if err := os.MkdirAll(s.MountDir, 0o700); err != nil {
		return err
	}
	var merr error
	mounted := false
	for _, fs := range []string{"ext4", "iso9660", "vfat"} {
		if merr = unix.Mount(dev, s.MountDir, fs, unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_NOSUID, ""); merr == nil {
			mounted = true
			break
		}
	}
	if !mounted {
		return fmt.Errorf("mount read-only: %w", merr)
	}
	defer unix.Unmount(s.MountDir, 0)
	root := s.MountDir
	if _, err := os.Stat(filepath.Join(root, "oci-layout")); err != nil {
		root = filepath.Join(s.MountDir, "bundle")
		if _, err := os.Stat(filepath.Join(root, "oci-layout")); err != nil {
			return fmt.Errorf("no OCI layout at / or /bundle (make the disk with 'imagebuild bundle disk')")
		}
	}
	s.say("verifying bundle disk %s", dev)
	refs, err := cache.AddLayout(ctx, root)
	if err != nil {
		return err
	}
	s.say("bundle disk %s added %d images to the cache: %v", dev, len(refs), refs)
	return nil
}
