package nodestate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lock takes the lock on firstboot's directory on TERRA-STATE (flock(2) on
// the directory itself: no file of its own to leave behind), which every
// Store holds while it changes the journal: the node's service and a
// command run beside it (`firstboot run --phase`, `firstboot backup`) take
// turns. unlock lets it go.
func (s Files) lock() (unlock func(), err error) {
	if err := s.MakeDir(); err != nil {
		return nil, err
	}
	p := s.path(dir)
	d, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("lock the journal: %w", err)
	}
	for {
		err = unix.Flock(int(d.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = d.Close() // the lock was not taken: nothing to let go
		return nil, fmt.Errorf("lock the journal: %w", &os.PathError{Op: "flock", Path: p, Err: err})
	}
	// Closing the directory lets the lock go.
	return func() { _ = d.Close() }, nil
}

// version tells one saved journal from another: its file's inode, size and
// modification time (a write replaces the file: a new inode).
type version struct {
	ino, size uint64
	mtime     time.Time
}

// savedVersion is the journal file's version; zero when there is none.
func (s Files) savedVersion() (version, error) {
	fi, err := os.Stat(s.path(JournalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return version{}, nil
	}
	if err != nil {
		return version{}, err
	}
	v := version{size: uint64(fi.Size()), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.ino = st.Ino
	}
	return v, nil
}
