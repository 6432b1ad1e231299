package registry

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Caps on what is read from a side-loaded layout. index.json, oci-layout,
// manifests and image configs are small in every real bundle (a few KiB);
// a blob is read up to its descriptor's size and no further.
const (
	sideloadIndexMax    = 4 << 20
	sideloadManifestMax = 4 << 20
	sideloadConfigMax   = 4 << 20
)

// layoutDir reads the files of an OCI layout through an os.Root opened on
// its directory: no path and no symlink leads out of it (ErrSideloadOutside),
// only regular files are opened (ErrSideloadNotRegular), and each read has a
// size cap (ErrSideloadTooLarge).
type layoutDir struct {
	dir  string
	root *os.Root
	// escapes is os.Root's "path escapes from parent" error, which package
	// os does not export; it is taken from the root itself (see
	// openLayoutDir).
	escapes error
}

// openLayoutDir opens the layout in dir. The caller closes it; an open
// layoutDir keeps its file system busy (a side-load disk cannot be
// unmounted under it).
func openLayoutDir(dir string) (*layoutDir, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	l := &layoutDir{dir: dir, root: root}
	// An absolute name is refused by os.Root before any system call, with
	// the same error as a symlink that escapes.
	var pe *fs.PathError
	if _, err := root.Lstat("/"); errors.As(err, &pe) {
		l.escapes = pe.Err
	}
	return l, nil
}

// checkSideloadDir refuses a side-loaded layout whose directory is not a
// directory itself: os.OpenRoot follows a symlink named as the root, and a
// symlink on the medium could lead anywhere.
func checkSideloadDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("open OCI layout %s: %w", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("open OCI layout %s: a symlink %w", dir, ErrSideloadOutside)
	case !fi.IsDir():
		return fmt.Errorf("open OCI layout %s: %s, not a directory", dir, kindOf(fi.Mode()))
	}
	return nil
}

// Close releases the directory.
func (l *layoutDir) Close() error { return l.root.Close() }

// path names a file of the layout in messages.
func (l *layoutDir) path(name string) string { return filepath.Join(l.dir, name) }

// open opens name, a regular file inside the layout of at most limit bytes
// (-1: any size). A symlink is followed only while it stays inside.
func (l *layoutDir) open(name string, limit int64) (*Content, error) {
	// Lstat first: opening a FIFO or a device has effects of its own.
	fi, err := l.root.Lstat(name)
	if err != nil {
		return nil, l.fail(name, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if fi, err = l.root.Stat(name); err != nil {
			return nil, l.fail(name, err)
		}
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s %w", l.path(name), kindOf(fi.Mode()), ErrSideloadNotRegular)
	}
	// O_NONBLOCK: should the file have changed into a FIFO since, opening
	// it does not wait for a writer.
	f, err := l.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, l.fail(name, err)
	}
	if fi, err = f.Stat(); err != nil {
		_ = f.Close() // read only
		return nil, fmt.Errorf("stat %s: %w", l.path(name), err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close() // read only
		return nil, fmt.Errorf("%s: %s %w", l.path(name), kindOf(fi.Mode()), ErrSideloadNotRegular)
	}
	if limit >= 0 && fi.Size() > limit {
		_ = f.Close() // read only
		return nil, fmt.Errorf("%s: %d bytes, more than %d: %w", l.path(name), fi.Size(), limit, ErrSideloadTooLarge)
	}
	return &Content{Body: f, Size: fi.Size(), Path: l.path(name)}, nil
}

// readFile reads name whole, up to limit bytes.
func (l *layoutDir) readFile(name string, limit int64) ([]byte, error) {
	c, err := l.open(name, limit)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// The size was checked, but a file may read longer than it says
	// (/proc, a file growing): never read past the cap.
	raw, err := io.ReadAll(io.LimitReader(c.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", l.path(name), err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", l.path(name), limit, ErrSideloadTooLarge)
	}
	return raw, nil
}

// readVerified reads the manifest h (at most limit bytes) and checks it
// against its digest.
func (l *layoutDir) readVerified(h v1.Hash, limit int64) ([]byte, error) {
	name, err := blobName(h)
	if err != nil {
		return nil, err
	}
	raw, err := l.readFile(name, limit)
	if err != nil {
		return nil, err
	}
	if err := matchDigest(bytes.NewReader(raw), h); err != nil {
		return nil, fmt.Errorf("%s: %w", l.path(name), err)
	}
	return raw, nil
}

// fail maps an error of os.Root to the package's errors.
func (l *layoutDir) fail(name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", l.path(name), ErrNotFound)
	case l.escapes != nil && errors.Is(err, l.escapes):
		return fmt.Errorf("%s: %w", l.path(name), ErrSideloadOutside)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s: a symlink loop %w", l.path(name), ErrSideloadNotRegular)
	}
	return fmt.Errorf("open %s: %w", l.path(name), err)
}

// blobName is where a layout keeps the blob h, relative to the layout.
func blobName(h v1.Hash) (string, error) {
	if err := checkHash(h); err != nil {
		return "", err
	}
	return filepath.Join("blobs", h.Algorithm, h.Hex), nil
}

// kindOf names a file type in messages.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}
