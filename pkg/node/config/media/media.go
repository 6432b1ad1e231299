// Package media finds the sticks a person inserts into a running node by
// their filesystem label and mounts them for one job: a support bundle
// written to a TERRA-SUPPORT stick, an upgrade file read from another. A
// medium is mounted only for the job (nosuid, nodev, noexec), synced and
// unmounted after it, so that pulling the stick afterwards loses nothing.
package media

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// byLabel is where udev links filesystems by label.
const byLabel = "/dev/disk/by-label"

// Medium is an inserted medium.
type Medium struct {
	// Device is the block device ("/dev/sdb1"), Label the label it was
	// found by.
	Device string
	Label  string
	// Insertion tells this insertion from any other: the device and the
	// kernel's sequence number of its disk ("/dev/sdb1#42"), which is new
	// for every disk the kernel sees, so a stick pulled and another put
	// in under the same device name between two looks is still another
	// insertion. Only the device where the kernel has no sequence number.
	Insertion string
}

// Media finds and mounts media.
type Media interface {
	// Find returns the first medium carrying one of the labels; false
	// when none is inserted.
	Find(labels ...string) (Medium, bool)
	// Use mounts m (writable or read-only) for fn, which gets the mount
	// point as a path on the host, and syncs and unmounts it after.
	Use(ctx context.Context, m Medium, writable bool, fn func(dir string) error) error
}

// Block are the machine's block devices, found under a host's root and
// mounted under Dir.
type Block struct {
	Host *host.Host
	// Dir is the private directory media are mounted under, a path on
	// the host.
	Dir string
}

var _ Media = (*Block)(nil)

// Find looks up /dev/disk/by-label.
func (b *Block) Find(labels ...string) (Medium, bool) {
	for _, l := range labels {
		link := b.Host.Path(filepath.Join(byLabel, l))
		dev, err := filepath.EvalSymlinks(link)
		if err != nil {
			continue
		}
		d := strings.TrimPrefix(dev, strings.TrimSuffix(b.Host.Root, "/"))
		return Medium{Device: d, Label: l, Insertion: b.insertion(d)}, true
	}
	return Medium{}, false
}

// insertion names this insertion of dev.
func (b *Block) insertion(dev string) string {
	if seq := DiskSeq(b.Host.Root, dev); seq != "" {
		return dev + "#" + seq
	}
	return dev
}

// DiskSeq is the kernel's sequence number of the disk holding the block
// device dev ("/dev/sdb1"), under root: new for every disk the kernel
// sees, so it tells a stick from the next one under the same name. It is
// in /sys/class/block/<dev>/diskseq for a whole disk and in its parent's
// directory for a partition (Linux 5.15 and later); "" where there is none.
func DiskSeq(root, dev string) string {
	sys, err := filepath.EvalSymlinks(filepath.Join(root, "/sys/class/block", filepath.Base(dev)))
	if err != nil {
		return ""
	}
	for _, dir := range []string{sys, filepath.Dir(sys)} {
		seq, err := os.ReadFile(filepath.Join(dir, "diskseq"))
		if err == nil {
			return strings.TrimSpace(string(seq))
		}
	}
	return ""
}

// filesystems are tried in order; ISO 9660 is read-only.
var filesystems = []string{"vfat", "exfat", "ext4", "iso9660"}

// errNoFilesystem: no filesystem Terrarium reads mounted.
var errNoFilesystem = errors.New("no FAT, exFAT, ext4 or ISO 9660 filesystem")

// ErrWriteProtected: a medium the node must write to is read-only.
var ErrWriteProtected = errors.New("the medium is write-protected (read-only); use a writable stick")

// Use mounts the medium with the first filesystem that takes it.
func (b *Block) Use(ctx context.Context, m Medium, writable bool, fn func(dir string) error) error {
	dir := filepath.Join(b.Dir, filepath.Base(m.Device))
	mnt := b.Host.Path(dir)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if !writable {
		flags |= unix.MS_RDONLY
	}
	var errs []error
	mounted := false
	for _, fs := range filesystems {
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs == "iso9660" && writable {
			continue
		}
		data := ""
		if fs == "vfat" || fs == "exfat" {
			data = "umask=0077"
		}
		if err := unix.Mount(b.Host.Path(m.Device), mnt, fs, flags, data); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fs, err))
			continue
		}
		mounted = true
		break
	}
	if !mounted && writable && errors.Is(errors.Join(errs...), unix.EROFS) {
		return fmt.Errorf("mount %s (%s): %w", m.Device, m.Label, ErrWriteProtected)
	}
	if !mounted {
		return fmt.Errorf("mount %s (%s): %w: %w", m.Device, m.Label, errNoFilesystem, errors.Join(errs...))
	}
	ferr := fn(dir)
	unix.Sync()
	if err := unix.Unmount(mnt, 0); err != nil && ferr == nil {
		ferr = &os.PathError{Op: "unmount", Path: mnt, Err: err}
	}
	return ferr
}
