// Package diskspace checks free space before the node writes something
// large: a side-loaded bundle into the registry cache, an upgrade file
// into the upgrade share, an etcd snapshot or a backup. On TERRA-STATE
// each keeps a reserve (the machine config's state.reserveMiB) free for
// etcd, whose database and write-ahead log must never meet a full disk;
// a write that would eat into it is refused before it starts, with the
// sizes and the fix.
//
// The file system is asked through FS, so tests fake it; Statfs is the
// running kernel's.
package diskspace

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Space is what a path's file system has.
type Space struct {
	// Avail is the bytes an unprivileged writer may still use
	// (statfs's f_bavail × f_bsize: what df calls Available), and Total
	// the file system's size.
	Avail, Total uint64
	// Device identifies the file system (stat's st_dev): two paths with
	// the same Device are on the same file system.
	Device uint64
}

// FS reports the space of the file system a path is on.
type FS interface {
	Space(path string) (Space, error)
}

// Statfs is FS on the running kernel: statfs(2) and stat(2).
type Statfs struct{}

var _ FS = Statfs{}

// Space implements FS.
func (Statfs) Space(path string) (Space, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return Space{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Space{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	bs := uint64(s.Bsize) //nolint:gosec // a block size is positive
	return Space{Avail: s.Bavail * bs, Total: s.Blocks * bs, Device: st.Dev}, nil
}

// OrStatfs is fs, or Statfs when fs is nil: the zero value of a struct
// holding an FS checks the real file system.
func OrStatfs(fs FS) FS {
	if fs == nil {
		return Statfs{}
	}
	return fs
}

// ErrNoSpace is matched (errors.Is) by every refusal for space (a
// *Shortage).
var ErrNoSpace = errors.New("not enough free space")

// Need is a write about to happen.
type Need struct {
	// What is written, for the message ("the side-load of bundle disk
	// /dev/sdb", "the upgrade file 0.2.0").
	What string
	// Path is where it is written (a directory, which must exist).
	Path string
	// Bytes is how much it writes, at most.
	Bytes uint64
	// Reserve is what must stay free after it: the STATE reserve on
	// TERRA-STATE, 0 elsewhere.
	Reserve uint64
	// Fix says what a person can do when it does not fit; Check adds
	// lowering state.reserveMiB when a reserve applies.
	Fix string
}

// Shortage is a refusal for space: Need did not fit beside the reserve.
type Shortage struct {
	Need
	// Avail is what the file system had free.
	Avail uint64
}

func (s *Shortage) Error() string {
	msg := fmt.Sprintf("%s needs %s on %s, which has %s free", s.What, Size(s.Bytes), s.Path, Size(s.Avail))
	if s.Reserve > 0 {
		msg += fmt.Sprintf(" and keeps %s of it for etcd (state.reserveMiB)", Size(s.Reserve))
	}
	msg += ": " + ErrNoSpace.Error()
	fix := s.Fix
	if s.Reserve > 0 {
		if fix != "" {
			fix += ", or "
		}
		fix += "lower state.reserveMiB in the node's config if etcd needs less"
	}
	if fix != "" {
		msg += "; " + fix
	}
	return msg
}

// Is makes a Shortage match ErrNoSpace.
func (s *Shortage) Is(target error) bool { return target == ErrNoSpace }

// Check asks fs for n.Path's space and refuses (a *Shortage) when n.Bytes
// would leave less than n.Reserve free. When fs cannot tell, the error
// says so: a write that was not measured does not start.
func Check(fs FS, n Need) error {
	sp, err := OrStatfs(fs).Space(n.Path)
	if err != nil {
		return fmt.Errorf("check the free space for %s: %w", n.What, err)
	}
	if sp.Avail < n.Reserve || sp.Avail-n.Reserve < n.Bytes {
		return &Shortage{Need: n, Avail: sp.Avail}
	}
	return nil
}

// SameFS reports whether paths a and b are on the same file system.
func SameFS(fs FS, a, b string) (bool, error) {
	fs = OrStatfs(fs)
	sa, err := fs.Space(a)
	if err != nil {
		return false, err
	}
	sb, err := fs.Space(b)
	if err != nil {
		return false, err
	}
	return sa.Device == sb.Device, nil
}

// Size formats n bytes for a person: "812 bytes", "4.0 KiB", "120.5 MiB",
// "1.0 GiB".
func Size(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// Fixed is an FS that reports the same space for every path: a stand-in
// for tests.
type Fixed Space

// Space implements FS.
func (f Fixed) Space(string) (Space, error) { return Space(f), nil }
