// Package configdisk writes and reads config disks: a small FAT filesystem
// labelled TERRA-CONFIG (stored as TERRA-CONFI: FAT labels hold 11 characters)
// holding machine.yaml, that QEMU attaches as a disk
// or a person writes to a USB stick with dd.
package configdisk

import (
	"errors"
	"fmt"
	"io"
	"os"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/terrarium-os/terrarium/pkg/layout"
)

// FileName is the machine config's name on the disk.
const FileName = "machine.yaml"

// Size of the config disk image.
const Size = 16 * layout.MiB

// Write creates the config disk image at path holding config (already
// validated by the caller). An existing file at path is replaced only once
// the new image is complete.
func Write(path string, config []byte) error {
	tmp := path + ".partial"
	os.Remove(tmp)
	err := write(tmp, config)
	if err == nil {
		err = freeRootCluster(tmp)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write config disk %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

func write(path string, config []byte) error {
	d, err := diskfs.Create(path, Size, diskfs.SectorSizeDefault)
	if err != nil {
		return err
	}
	defer d.Close()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: layout.LabelConfigFAT, Reproducible: true})
	if err != nil {
		return err
	}
	f, err := fs.OpenFile("/"+FileName, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return err
	}
	if _, err := f.Write(config); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// maxConfigSize is the largest machine.yaml Read accepts.
const maxConfigSize = 1 << 20

// ErrNoConfig means the disk has no machine.yaml.
var ErrNoConfig = errors.New("no " + FileName + " on the config disk")

// Read returns machine.yaml from a config disk (a device or an image
// file), opened read-only: reading never changes the disk.
func Read(path string) ([]byte, error) {
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("open config disk %s: %w", path, err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(0)
	if err != nil {
		return nil, fmt.Errorf("config disk %s: no FAT filesystem: %w", path, err)
	}
	f, err := fs.OpenFile("/"+FileName, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("config disk %s: %w", path, ErrNoConfig)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config disk %s: %w", path, err)
	}
	if fi.Size() > maxConfigSize {
		return nil, fmt.Errorf("config disk %s: %s is %d bytes, more than the %d allowed", path, FileName, fi.Size(), maxConfigSize)
	}
	// Never hand go-diskfs a buffer larger than what is left of the file:
	// its FAT reader (v1.9.4) then fills the buffer from the rest of the
	// cluster, past the end of the file.
	data, err := io.ReadAll(io.LimitReader(f, fi.Size()))
	if err != nil {
		return nil, fmt.Errorf("read %s from %s: %w", FileName, path, err)
	}
	return data, nil
}
