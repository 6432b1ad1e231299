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
	"github.com/terrarium-os/terrarium/pkg/contract/signature"

	"github.com/terrarium-os/terrarium/pkg/node/media"
	"github.com/terrarium-os/terrarium/pkg/node/registry"
	"golang.org/x/sys/unix"
)

// Labels of a side-load disk: ext4 and ISO 9660 hold the full name, FAT
// truncates it to 11 characters.
var bundleLabels = []string{layout.LabelBundle, layout.LabelBundleFAT}

// mountFlags mount a side-load disk: never written, and nothing on it is a
// device, runs, or gains privileges.
const mountFlags = unix.MS_RDONLY | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOSUID

// layoutAdder is what the side-loader needs of the cache.
type layoutAdder interface {
	AddLayout(ctx context.Context, dir string, opts ...registry.AddOption) ([]string, error)
}

var _ layoutAdder = (*registry.Cache)(nil)

// SideLoader adds bundles from disks labelled TERRA-BUNDLE, attached at
// boot or later, to the node's cache.
type SideLoader struct {
	LabelDir string // /dev/disk/by-label
	MountDir string // a private mount point
	Console  io.Writer
	Log      *slog.Logger
	Interval time.Duration
	// SignedOnly takes only bundles whose index is signed by one of Keys
	// (the node's trusted keys).
	SignedOnly bool
	Keys       []signature.PublicKey

	// mount and unmount default to mount(2) with mountFlags and
	// umount(2); tests replace them.
	mount   func(dev, dir string) error
	unmount func(dir string) error
}

// Watch polls for bundle disks until ctx ends. Each disk (by device, size
// and the kernel's sequence number) is loaded once per insertion: a
// refused disk is reported once, and the registry keeps serving (nothing
// of it was added).
func (s *SideLoader) Watch(ctx context.Context, cache layoutAdder) {
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
				s.say("bundle disk %s refused, nothing was added to the cache (the registry keeps serving): %v", dev, err)
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
	// The disk's sequence number tells a disk from the next one under the
	// same name and of the same size.
	return fmt.Sprintf("%s:%d#%s", real, size, media.DiskSeq("/", real))
}

func (s *SideLoader) say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.Log.Info("registry: " + msg)
	if s.Console != nil {
		fmt.Fprintf(s.Console, "terrarium: %s\n", msg)
	}
}

// load mounts dev and adds its layout to the cache. A panic on the disk's
// content is an error too: the service must not restart into the same
// disk.
func (s *SideLoader) load(ctx context.Context, dev string, cache layoutAdder) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error while reading the disk (please report it): %v", r)
		}
	}()
	if err := os.MkdirAll(s.MountDir, 0o700); err != nil {
		return err
	}
	mount, unmount := s.mount, s.unmount
	if mount == nil {
		mount = mountReadOnly
	}
	if unmount == nil {
		unmount = func(dir string) error { return unix.Unmount(dir, 0) }
	}
	if err := mount(dev, s.MountDir); err != nil {
		return err
	}
	defer func() {
		if err := unmount(s.MountDir); err != nil {
			s.Log.Warn("registry: unmount bundle disk", "dir", s.MountDir, "err", err)
		}
	}()
	// AddLayout refuses a layout directory that is a symlink, so a
	// "bundle" linking out of the disk goes no further.
	root := s.MountDir
	if _, err := os.Lstat(filepath.Join(root, "oci-layout")); err != nil {
		root = filepath.Join(s.MountDir, "bundle")
		if _, err := os.Lstat(filepath.Join(root, "oci-layout")); err != nil {
			return fmt.Errorf("no OCI layout at / or /bundle (make the disk with 'imagebuild bundle disk')")
		}
	}
	s.say("verifying bundle disk %s", dev)
	var opts []registry.AddOption
	if s.SignedOnly {
		opts = append(opts, registry.SignedBy(s.Keys))
	}
	refs, err := cache.AddLayout(ctx, root, opts...)
	if err != nil {
		return err
	}
	s.say("bundle disk %s added %d images to the cache: %v", dev, len(refs), refs)
	return nil
}

// mountReadOnly mounts dev on dir with mountFlags, trying the file systems
// a bundle disk may have.
func mountReadOnly(dev, dir string) error {
	var err error
	for _, fs := range []string{"ext4", "iso9660", "vfat"} {
		if err = unix.Mount(dev, dir, fs, mountFlags, ""); err == nil {
			return nil
		}
	}
	return fmt.Errorf("mount read-only: %w", err)
}
