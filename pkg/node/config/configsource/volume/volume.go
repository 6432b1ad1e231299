// Package volume reads small files from a config volume — a FAT or
// ISO9660 filesystem on a disk, a partition, a USB stick or a CD, found by
// its label — without mounting it and without ever writing to it. Config
// sources (TERRA-CONFIG, NoCloud's CIDATA, OpenStack's config-2) read
// their files through it.
//
// A volume is outside input: every read is capped, only names in the
// volume's own directories are looked up, and a filesystem library panic
// on a malformed volume is recovered into ErrMalformed.
package volume

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

var (
	// ErrNotFound means the volume has no such file.
	ErrNotFound = errors.New("no such file on the volume")
	// ErrTooLarge means a file is larger than the caller's cap.
	ErrTooLarge = errors.New("larger than allowed")
	// ErrMalformed means the volume's filesystem cannot be read.
	ErrMalformed = errors.New("the volume's filesystem is malformed")
)

// Volume is an open config volume.
type Volume struct {
	dev  string
	disk interface{ Close() error }
	fs   filesystem.FileSystem
}

// Open opens the volume on dev (a block device or an image file)
// read-only.
func Open(dev string) (v *Volume, err error) {
	defer recoverMalformed(dev, &err)
	d, err := diskfs.Open(dev, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dev, err)
	}
	fs, err := filesystemOf(d)
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("%s: no FAT or ISO9660 filesystem: %w", dev, err)
	}
	return &Volume{dev: dev, disk: d, fs: fs}, nil
}

// filesystemOf finds the filesystem on the whole of d. go-diskfs reads an
// ISO 9660 filesystem in the device's own block size, so an ISO on a disk
// with 512-byte blocks (a NoCloud or config-2 image attached as a virtio or
// USB disk rather than a CD-ROM) is not found; it is then read again in
// ISO 9660's own 2048-byte blocks.
func filesystemOf(d *disk.Disk) (filesystem.FileSystem, error) {
	fs, err := d.GetFilesystem(0)
	if err == nil || d.DefaultBlocks {
		return fs, err
	}
	if iso, isoErr := iso9660.Read(d.Backend, d.Size, 0, 0); isoErr == nil {
		return iso, nil
	}
	return nil, err
}

// Close releases the device.
func (v *Volume) Close() error { return v.disk.Close() }

// ReadFile returns the file at name ("machine.yaml",
// "openstack/latest/meta_data.json"), matched case-insensitively as FAT and
// ISO9660 store names, if it is at most limit bytes. A missing file gives
// an error wrapping ErrNotFound.
func (v *Volume) ReadFile(name string, limit int64) (data []byte, err error) {
	defer recoverMalformed(v.dev, &err)
	clean := path.Clean("/" + name)
	if clean == "/" || strings.Contains(name, "\\") {
		return nil, fmt.Errorf("%s: %q is not a file name", v.dev, name)
	}
	dir, base := path.Split(clean)
	entries, err := v.fs.ReadDir(dirName(dir))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", v.dev, name, ErrNotFound)
	}
	for _, e := range entries {
		if !strings.EqualFold(e.Name(), base) {
			continue
		}
		if e.IsDir() { // go-diskfs's FileInfo.Mode has no ModeDir
			return nil, fmt.Errorf("%s: %s is a directory", v.dev, name)
		}
		fi, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", v.dev, name, err)
		}
		if fi.Size() > limit {
			return nil, fmt.Errorf("%s: %s is %d bytes: %w (%d)", v.dev, name, fi.Size(), ErrTooLarge, limit)
		}
		f, err := v.fs.OpenFile(path.Join(dir, e.Name()), os.O_RDONLY)
		if err != nil {
			return nil, fmt.Errorf("%s: open %s: %w", v.dev, name, err)
		}
		defer f.Close()
		// Never hand go-diskfs a buffer larger than what is left of the
		// file: its FAT reader (v1.9.4) then fills the buffer from the
		// rest of the cluster, past the end of the file.
		data, err := io.ReadAll(io.LimitReader(f, fi.Size()))
		if err != nil {
			return nil, fmt.Errorf("%s: read %s: %w", v.dev, name, err)
		}
		return data, nil
	}
	return nil, fmt.Errorf("%s: %s: %w", v.dev, name, ErrNotFound)
}

// recoverMalformed turns a panic of the filesystem library on a malformed
// volume into ErrMalformed.
func recoverMalformed(dev string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %w (%v)", dev, ErrMalformed, r)
	}
}

// dirName is how go-diskfs names a directory: "." for the root.
func dirName(dir string) string {
	dir = strings.Trim(dir, "/")
	if dir == "" {
		return "."
	}
	return dir
}
