// Package configdisk writes and reads config disks: a small FAT filesystem
// labelled TERRA-CONFIG (stored as TERRA-CONFI: FAT labels hold 11 characters)
// holding machine.yaml and, when the config is signed, its detached
// signature machine.yaml.sig, that QEMU attaches as a disk or a person
// writes to a USB stick with dd.
package configdisk

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// FileName is the machine config's name on the disk.
const FileName = layout.ConfigFile

// SignatureFileName is the name of the config's detached signature on the
// disk (see package signature), absent on an unsigned disk.
const SignatureFileName = layout.ConfigSignatureFile

// Size of the config disk image.
const Size = 16 * layout.MiB

// Write creates the config disk image at path holding config (already
// validated by the caller) and no signature. An existing file at path is
// replaced only once the new image is complete.
func Write(path string, config []byte) error {
	return WriteSigned(path, config, nil)
}

// WriteSigned is Write with config's detached signature (the content of a
// signature file, see package signature) stored beside it as
// SignatureFileName. With a nil sig it writes the same image as Write.
func WriteSigned(path string, config, sig []byte) error {
	if len(sig) > signature.MaxFileSize {
		return fmt.Errorf("write config disk %s: %s: %w", path, SignatureFileName, errSignatureSize(len(sig)))
	}
	tmp := path + ".partial"
	_ = os.Remove(tmp) // a leftover of an interrupted write; diskfs.Create refuses one that stays
	err := write(tmp, config, sig)
	if err == nil {
		err = freeRootCluster(tmp)
	}
	if err == nil {
		// A control plane's disk carries the cluster's keys: never
		// readable by others, not even before the rename.
		err = os.Chmod(tmp, 0o600)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write config disk %s: %w", path, err)
	}
	return atomicfile.Replace(tmp, path)
}

func write(path string, config, sig []byte) (err error) {
	d, err := diskfs.Create(path, Size, diskfs.SectorSizeDefault)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: layout.LabelConfigFAT, Reproducible: true})
	if err != nil {
		return err
	}
	if err := writeFile(fs, FileName, config); err != nil {
		return err
	}
	if sig == nil {
		return nil
	}
	return writeFile(fs, SignatureFileName, sig)
}

func writeFile(fs filesystem.FileSystem, name string, data []byte) error {
	f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	// go-diskfs stamps entries with the time (or SOURCE_DATE_EPOCH): two
	// disks of the same config written a second apart would differ.
	if ct, ok := fs.(interface {
		Chtimes(p string, ctime, atime, mtime time.Time) error
	}); ok {
		if err := ct.Chtimes("/"+name, fileTime, fileTime, fileTime); err != nil {
			return fmt.Errorf("set the times of %s: %w", name, err)
		}
	}
	return nil
}

// fileTime is every file's time on a config disk, so that the same config
// always gives the same disk.
var fileTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrSignatureTooLarge means a signature is larger than
// signature.MaxFileSize, so it cannot be one.
var ErrSignatureTooLarge = errors.New("too large to be a signature; " +
	"replace it with the one `imagebuild config sign` writes")

func errSignatureSize(n int) error {
	return fmt.Errorf("%d bytes, more than %d: %w", n, signature.MaxFileSize, ErrSignatureTooLarge)
}
