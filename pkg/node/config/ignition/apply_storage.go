package ignition

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// storage writes directories, then files, then links (each sorted by
// path, so parents first), owned as the config says: accounts are read
// after the users step made them.
func (a *applier) storage(ctx context.Context) error {
	acc, err := readAccounts(a.h)
	if err != nil {
		return err
	}
	for _, d := range a.c.Directories {
		if err := a.directory(acc, d); err != nil {
			return fmt.Errorf("directory %s: %w", d.Path, err)
		}
	}
	for _, f := range a.c.Files {
		if err := a.file(acc, f); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	for _, l := range a.c.Links {
		if err := a.link(acc, l); err != nil {
			return fmt.Errorf("link %s: %w", l.Path, err)
		}
	}
	return nil
}

func (a *applier) directory(acc *accounts, d ignitionspec.Directory) error {
	uid, gid, err := acc.ids(d.Owner)
	if err != nil {
		return err
	}
	full := a.h.Path(d.Path)
	if fi, err := os.Lstat(full); err == nil && !fi.IsDir() {
		// Check allowed it: overwrite is set.
		if err := os.Remove(full); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(full, d.Mode); err != nil {
		return err
	}
	return setMeta(full, d.Mode, uid, gid)
}

func (a *applier) file(acc *accounts, f ignitionspec.File) error {
	uid, gid, err := acc.ids(f.Owner)
	if err != nil {
		return err
	}
	full := a.h.Path(f.Path)
	fi, err := os.Lstat(full)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		// Check allowed it: overwrite is set. Replace the link, not
		// what it points to.
		if err := os.Remove(full); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	switch {
	case f.HasContents:
		if a.st.Written[f.Path] != digest(f.Contents) {
			a.st.wrote(f.Path, digest(f.Contents))
			if err := a.save(); err != nil {
				return err
			}
		}
		if _, err := a.h.WriteIfChanged(f.Path, f.Contents, f.Mode); err != nil {
			return err
		}
	case fi == nil || fi.Mode()&fs.ModeSymlink != 0:
		// No contents given: an empty file when there is none.
		if _, err := a.h.WriteIfChanged(f.Path, nil, f.Mode); err != nil {
			return err
		}
	}
	return setMeta(full, f.Mode, uid, gid)
}

func (a *applier) link(acc *accounts, l ignitionspec.Link) error {
	uid, gid, err := acc.ids(l.Owner)
	if err != nil {
		return err
	}
	full := a.h.Path(l.Path)
	if target, err := os.Readlink(full); err != nil || target != l.Target {
		if a.st.Written[l.Path] != linkMark(l.Target) {
			a.st.wrote(l.Path, linkMark(l.Target))
			if err := a.save(); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		// Check allowed replacing what is there.
		if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(l.Target, full); err != nil {
			return err
		}
	}
	return setOwner(full, uid, gid)
}

// setMeta sets a file's or directory's mode and owner where they differ.
func setMeta(full string, mode fs.FileMode, uid, gid int) error {
	fi, err := os.Lstat(full)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != mode {
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	return setOwner(full, uid, gid)
}

// setOwner sets the owner of a file, directory or link (not what a link
// points to) where it differs.
func setOwner(full string, uid, gid int) error {
	fi, err := os.Lstat(full)
	if err != nil {
		return err
	}
	if u, g, ok := fileOwner(fi); ok && u == uid && g == gid {
		return nil
	}
	return os.Lchown(full, uid, gid)
}
