package nodestate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
)

// A File is one of firstboot's files on TERRA-STATE, named by its path
// relative to the filesystem's root. Its String is where a running node
// sees it, for messages; it is opened only through Files.
type File string

// firstboot's files on TERRA-STATE (the package doc says what each is).
const (
	JournalFile        File = layout.StateJournal
	ConfigFile         File = layout.StateNodeConfig
	MarkerFile         File = layout.StateMarkerFile
	ResetRequestFile   File = layout.StateResetRequest
	UpgradeRequestFile File = layout.StateUpgradeRequest
	UpgradeResultFile  File = layout.StateUpgradeResult
	// healthProbe is written and removed by ProbeWritable.
	healthProbe File = layout.StateTerrarium + "/.health"
	// dir is the directory that holds them.
	dir File = layout.StateTerrarium
)

// String is the file's path on a running node: /state/terrarium/….
func (f File) String() string { return path.Join(layout.StateMount, string(f)) }

// Files are firstboot's files on one TERRA-STATE filesystem. Their paths
// are built here only (Files.path), from where the filesystem is mounted.
type Files struct{ root string }

// On is the TERRA-STATE a host has mounted at layout.StateMount.
func On(h *host.Host) Files { return At(h.Path(layout.StateMount)) }

// At is a TERRA-STATE mounted at root: the initramfs's before it switches
// root, a new disk's the ISO installer seeds.
func At(root string) Files { return Files{root: root} }

// path is where f is.
func (s Files) path(f File) string { return filepath.Join(s.root, filepath.FromSlash(string(f))) }

// MakeDir makes the directory that holds the files (the initramfs makes
// it on every boot; every write makes it too).
func (s Files) MakeDir() error {
	if err := os.MkdirAll(s.path(dir), 0o755); err != nil {
		return fmt.Errorf("make firstboot's directory on TERRA-STATE: %w", err)
	}
	return nil
}

// write replaces f with data, atomically and durably: every file of the
// package is written here.
func (s Files) write(f File, data []byte, perm os.FileMode) error {
	if err := s.MakeDir(); err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path(f), data, perm)
}

// remove removes f, durably; a file that is not there is removed.
func (s Files) remove(f File) error {
	p := s.path(f)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("removed %s: %w", p, err)
	}
	return nil
}

// read reads f, which must hold at most limit bytes (ErrTooLarge).
func (s Files) read(f File, limit int64) ([]byte, error) {
	b, err := s.readUpTo(f, limit+1)
	if err == nil && int64(len(b)) > limit {
		return nil, &os.PathError{Op: "read", Path: s.path(f), Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)}
	}
	return b, err
}

// readUpTo reads the first limit bytes of f.
func (s Files) readUpTo(f File, limit int64) ([]byte, error) {
	p := s.path(f)
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, limit))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: p, Err: err}
	}
	return b, nil
}

// exists reports whether f is there.
func (s Files) exists(f File) (bool, error) {
	_, err := os.Lstat(s.path(f))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}
