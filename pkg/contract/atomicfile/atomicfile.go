// Package atomicfile replaces files atomically and durably.
//
// A reader of the path sees the old file or the new one whole, never a
// partial write: the content goes to a temporary file in the path's
// directory, which is given its mode, synced, closed and renamed over the
// path, and then the directory is synced. When a call returns nil the new
// file, its content and its directory entry are on disk, so the
// replacement survives a power cut.
//
// Every call writes its own uniquely named temporary file, so writers to
// the same path never share one: the last rename wins, and whichever file
// is at the path is one writer's complete content. On an error the
// temporary file is removed and the path is left as it was, except when
// only the final directory sync failed (ErrNotDurable). Parent directories
// are not created.
//
// Errors are *os.PathError naming the path being replaced, wrapping the
// cause.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNotDurable is wrapped by an error returned after the file was renamed
// into place but its directory could not be synced: the path holds the new
// content, which may not survive a power cut.
var ErrNotDurable = errors.New("replaced but not synced to disk")

const (
	opWrite   = "atomicfile: write"
	opReplace = "atomicfile: replace"
)

// WriteFile replaces path with a file holding data, with mode perm (set
// with chmod, so the umask does not apply).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with a file holding what fill writes to w, with mode
// perm (set with chmod, so the umask does not apply). When fill returns an
// error nothing is renamed and the error is returned wrapped.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) error {
	return write(path, perm, fill, true)
}

// WriteFileUnsynced replaces path atomically as WriteFile does, but leaves
// its durability to a later SyncFS of its file system: for many small
// files written together, which one sync makes durable (a sync costs tens
// of milliseconds on an emulated disk). Until then a power cut may leave
// the old file or none at the path, or an empty new one.
func WriteFileUnsynced(path string, data []byte, perm os.FileMode) error {
	return write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, false)
}

// SyncFS makes everything written to the file system that holds path
// durable (syncfs(2)).
func SyncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return &os.PathError{Op: "atomicfile: syncfs", Path: path, Err: err}
	}
	return nil
}

func write(path string, perm os.FileMode, fill func(w io.Writer) error, sync bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return &os.PathError{Op: opWrite, Path: path, Err: err}
	}
	done := false
	defer func() { // also when fill panics
		if !done {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	err = fill(f)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: opWrite, Path: path, Err: err}
	}
	done = true
	if !sync {
		if err := os.Rename(f.Name(), path); err != nil {
			_ = os.Remove(f.Name())
			return &os.PathError{Op: opWrite, Path: path, Err: err}
		}
		return nil
	}
	return commit(opWrite, f.Name(), path)
}

// Replace syncs the regular file tmp, which something else wrote, renames
// it over path and syncs path's directory. tmp must be on the same file
// system as path, normally in the same directory. On an error tmp is
// removed.
func Replace(tmp, path string) error {
	if err := syncFile(tmp); err != nil {
		_ = os.Remove(tmp)
		return &os.PathError{Op: opReplace, Path: path, Err: err}
	}
	return commit(opReplace, tmp, path)
}

// SyncDir syncs the directory dir, making the creation, removal and
// renaming of its entries durable.
func SyncDir(dir string) error {
	return syncFile(dir)
}

// SyncFile syncs the file at path, which something else wrote.
func SyncFile(path string) error {
	return syncFile(path)
}

// commit renames the synced file tmp over path and syncs the directory.
func commit(op, tmp, path string) error {
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return &os.PathError{Op: op, Path: path, Err: err}
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return &os.PathError{Op: op, Path: path, Err: fmt.Errorf("%w: %w", ErrNotDurable, err)}
	}
	return nil
}

// syncFile opens path read-only (enough for fsync) and syncs it.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
