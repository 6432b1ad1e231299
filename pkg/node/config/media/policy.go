package media

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Access is what a job does with a medium.
type Access int

const (
	// Read only reads the medium (an upgrade file, a backup to restore,
	// a side-load bundle).
	Read Access = iota
	// Write writes to it (a support bundle, a backup).
	Write
)

func (a Access) String() string {
	if a == Write {
		return "writes"
	}
	return "reads"
}

// MarshalText is the access as the stick service's requests name it.
func (a Access) MarshalText() ([]byte, error) {
	if a == Write {
		return []byte("write"), nil
	}
	return []byte("read"), nil
}

// UnmarshalText reads MarshalText's names, no others.
func (a *Access) UnmarshalText(b []byte) error {
	switch string(b) {
	case "write":
		*a = Write
	case "read":
		*a = Read
	default:
		return fmt.Errorf("the access %q is neither read nor write", b)
	}
	return nil
}

// Allowed is the one policy of what the kernel may mount from a medium a
// person attaches to a running node: FAT or exFAT, whose parsers are
// small, and ISO 9660 (which is read-only) for media only read. Anything
// else (ext4, btrfs, XFS, NTFS …) is a filesystem made by whoever holds
// the stick, which the node's kernel would parse with all of its
// privileges: refused. Config disks are read by package volume without
// mounting them.
func Allowed(fs Filesystem, a Access) bool {
	switch fs {
	case VFAT, ExFAT:
		return true
	case ISO9660:
		return a == Read
	}
	return false
}

// MountFlags are mount(2)'s flags for a medium: nothing on it is a
// device, runs, or gains privileges; read-only unless written.
func MountFlags(a Access) uintptr {
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if a != Write {
		flags |= unix.MS_RDONLY
	}
	return flags
}

// mountData are a filesystem's mount options: FAT's files are the
// node's (root's) alone.
func mountData(fs Filesystem) string {
	if fs == VFAT || fs == ExFAT {
		return "umask=0077"
	}
	return ""
}

// ErrFilesystemRefused means a medium's filesystem is not one the node
// mounts for the job (Allowed).
var ErrFilesystemRefused = errors.New("filesystem refused")

// RefusedError says which medium was refused, what it holds and how to
// make one the node takes.
type RefusedError struct {
	Medium Medium
	Found  Filesystem
	Access Access
}

func (e *RefusedError) Error() string {
	allowed := "FAT or exFAT"
	if e.Access == Read {
		allowed = "FAT, exFAT or ISO 9660"
	}
	return fmt.Sprintf("the stick %s (%s) holds %s; the node %s only %s sticks, so that its kernel never parses another filesystem made by whoever holds the stick: %s",
		e.Medium.Device, e.Medium.Label, e.Found.described(), e.Access, allowed, Fix(e.Medium.Label))
}

func (e *RefusedError) Unwrap() error { return ErrFilesystemRefused }

// Fix says how to make a stick labelled label that the node takes.
func Fix(label string) string {
	switch label {
	case layout.LabelBundle, layout.LabelBundleFAT:
		return "write the disk again with `imagebuild bundle disk` (FAT32) and copy it to the stick"
	}
	fat, exfat := "mkfs.vfat -F 32", "mkfs.exfat"
	if strings.HasPrefix(label, "TERRA-") {
		// FAT and exFAT labels hold 11 characters.
		short := label[:min(len(label), 11)]
		fat, exfat = fat+" -n "+short, exfat+" -L "+short
	}
	const dev = "/dev/sdX1"
	return fmt.Sprintf("format the stick FAT32 on another machine (this erases it): %s %s (or exFAT for files over 4 GiB: %s %s)", fat, dev, exfat, dev)
}

// Mount mounts the medium m, whose block device is dev (a path on this
// machine), on dir for a job that does a, after checking from its first
// bytes that its filesystem is Allowed: the kernel mounts it as the
// filesystem found, never guessing, with MountFlags. A refusal is a
// *RefusedError.
func Mount(dev string, m Medium, dir string, a Access) (Filesystem, error) {
	f, err := os.Open(dev)
	if err != nil {
		return Unknown, fmt.Errorf("the stick %s (%s): %w", m.Device, m.Label, err)
	}
	fs, err := Probe(f)
	_ = f.Close() // read only
	if err != nil {
		return Unknown, fmt.Errorf("the stick %s (%s): %w", m.Device, m.Label, err)
	}
	if !Allowed(fs, a) {
		return fs, &RefusedError{Medium: m, Found: fs, Access: a}
	}
	if err := unix.Mount(dev, dir, string(fs), MountFlags(a), mountData(fs)); err != nil {
		if a == Write && errors.Is(err, unix.EROFS) {
			return fs, fmt.Errorf("mount %s (%s): %w", m.Device, m.Label, ErrWriteProtected)
		}
		return fs, fmt.Errorf("mount %s (%s) as %s: %w", m.Device, m.Label, fs, err)
	}
	return fs, nil
}
