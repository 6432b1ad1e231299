// Package media finds the sticks a person inserts into a running node by
// their filesystem label and mounts them for one job: a support bundle
// written to a TERRA-SUPPORT stick, an upgrade file read from another. A
// medium is mounted only if its own first bytes show a filesystem the
// policy allows for the job (FAT or exFAT; ISO 9660 when only read:
// Allowed), as that filesystem, only for the job (nosuid, nodev, noexec;
// read-only unless written), and synced and unmounted after it whatever
// the job did, so that pulling the stick afterwards loses nothing.
package media

import (
	"context"
	"errors"
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
	// point (or a link to the mount's root) as a path on the host, and
	// syncs and unmounts it after.
	Use(ctx context.Context, m Medium, writable bool, fn func(dir string) error) error
}

// Block are the machine's block devices, found under a host's root and
// mounted under Dir.
type Block struct {
	Host *host.Host
	// Dir is the private directory media are mounted under, a path on
	// the host.
	Dir string
	// Service is the stick service's socket (layout.StickSocket), a path
	// on the host: when set, a medium a job writes to is mounted by that
	// service in a sandbox of its own, not by this process, and the job
	// gets the mount's root through a link under Dir.
	Service string
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

// ErrWriteProtected means a medium the node must write to is read-only.
var ErrWriteProtected = errors.New("the medium is write-protected (read-only); use a writable stick")

// Use mounts the medium as the filesystem its first bytes show, if the
// policy allows it for the job (Allowed, Mount), and after fn, whatever
// fn did (an error, a panic), syncs and unmounts it.
func (b *Block) Use(ctx context.Context, m Medium, writable bool, fn func(dir string) error) (ferr error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	if writable && b.Service != "" {
		return b.useService(ctx, m, Write, fn)
	}
	dir := filepath.Join(b.Dir, filepath.Base(m.Device))
	mnt := b.Host.Path(dir)
	// A link a written stick's job left (useService) when this process
	// died in it is no mount point.
	if fi, err := os.Lstat(mnt); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(mnt); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	a := Read
	if writable {
		a = Write
	}
	if _, err := Mount(b.Host.Path(m.Device), m, mnt, a); err != nil {
		return err
	}
	defer func() {
		if err := release(mnt); err != nil && ferr == nil {
			ferr = err
		}
	}()
	return fn(dir)
}

// release makes what was written to the medium mounted on mnt durable and
// unmounts it; a mount still busy is detached, so that none is left
// behind, and reported.
func release(mnt string) error {
	var errs []error
	if d, err := os.Open(mnt); err == nil {
		if err := unix.Syncfs(int(d.Fd())); err != nil {
			errs = append(errs, &os.PathError{Op: "syncfs", Path: mnt, Err: err})
		}
		_ = d.Close() // opened only for syncfs, checked above
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		errs = append(errs, &os.PathError{Op: "unmount", Path: mnt, Err: err})
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	}
	return errors.Join(errs...)
}
