// Package configdisk writes and reads config disks: a small FAT filesystem
// labelled TERRA-CONFIG (stored as TERRA-CONFI: FAT labels hold 11 characters)
// holding machine.yaml and, when the config is signed, its detached
// signature machine.yaml.sig, that QEMU attaches as a disk or a person
// writes to a USB stick with dd.
package configdisk

import (
	"errors"
	"fmt"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"io"
	"os"
	"strings"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// FileName is the machine config's name on the disk.
const FileName = "machine.yaml"

// SignatureFileName is the name of the config's detached signature on the
// disk (see package signature), absent on an unsigned disk.
const SignatureFileName = FileName + signature.FileSuffix

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
	os.Remove(tmp)
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
		os.Remove(tmp)
		return fmt.Errorf("write config disk %s: %w", path, err)
	}
	return atomicfile.Replace(tmp, path)
}

func write(path string, config, sig []byte) error {
	d, err := diskfs.Create(path, Size, diskfs.SectorSizeDefault)
	if err != nil {
		return err
	}
	defer d.Close()
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
		f.Close()
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

// maxConfigSize is the largest machine.yaml Read accepts.
const maxConfigSize = 1 << 20

var (
	// ErrNoConfig means the disk has no machine.yaml.
	ErrNoConfig = errors.New("no " + FileName + " on the config disk")
	// ErrSignatureTooLarge means the disk's machine.yaml.sig is larger
	// than signature.MaxFileSize, so it cannot be a signature.
	ErrSignatureTooLarge = errors.New("too large to be a signature; " +
		"replace it with the one `imagebuild config sign` writes")
)

func errSignatureSize(n int) error {
	return fmt.Errorf("%d bytes, more than %d: %w", n, signature.MaxFileSize, ErrSignatureTooLarge)
}

// Files are the files of a config disk.
type Files struct {
	// Config is machine.yaml.
	Config []byte
	// Signature is machine.yaml.sig, or nil when the disk has none.
	Signature []byte
}

// Read returns machine.yaml from a config disk (a device or an image
// file), opened read-only: reading never changes the disk. It ignores any
// signature; ReadFiles reads both.
func Read(path string) ([]byte, error) {
	var config []byte
	err := withFS(path, func(fs filesystem.FileSystem) (err error) {
		config, err = readConfig(fs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return config, nil
}

// ReadFiles returns machine.yaml and, when there is one, its signature
// machine.yaml.sig from a config disk (a device or an image file), opened
// read-only: reading never changes the disk. A disk without machine.yaml
// gives ErrNoConfig; a signature larger than signature.MaxFileSize gives
// ErrSignatureTooLarge. ReadFiles does not check the signature.
func ReadFiles(path string) (Files, error) {
	var files Files
	err := withFS(path, func(fs filesystem.FileSystem) (err error) {
		if files.Config, err = readConfig(fs); err != nil {
			return err
		}
		if files.Signature, err = readSignature(fs); err != nil {
			return fmt.Errorf("%s: %w", SignatureFileName, err)
		}
		return nil
	})
	if err != nil {
		return Files{}, err
	}
	return files, nil
}

// withFS opens the config disk at path read-only and calls do with its
// filesystem, adding the disk to do's error.
func withFS(path string, do func(filesystem.FileSystem) error) error {
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return fmt.Errorf("open config disk %s: %w", path, err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(0)
	if err != nil {
		return fmt.Errorf("config disk %s: no FAT filesystem: %w", path, err)
	}
	if err := do(fs); err != nil {
		return fmt.Errorf("config disk %s: %w", path, err)
	}
	return nil
}

// readConfig returns FileName, or ErrNoConfig.
func readConfig(fs filesystem.FileSystem) ([]byte, error) {
	f, err := fs.OpenFile("/"+FileName, os.O_RDONLY)
	if err != nil {
		return nil, ErrNoConfig
	}
	config, err := readAll(f, maxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FileName, err)
	}
	return config, nil
}

// readSignature returns SignatureFileName, or nil when there is none. It
// looks the file up in the root directory first, as go-diskfs's "does not
// exist" errors cannot be told from others.
func readSignature(fs filesystem.FileSystem) ([]byte, error) {
	entries, err := fs.ReadDir(".")
	if err != nil {
		return nil, fmt.Errorf("read the root directory: %w", err)
	}
	for _, e := range entries {
		if !strings.EqualFold(e.Name(), SignatureFileName) {
			continue
		}
		if e.IsDir() { // go-diskfs's FileInfo.Mode has no ModeDir
			return nil, errors.New("is a directory, not a signature file")
		}
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		if fi.Size() > signature.MaxFileSize {
			return nil, errSignatureSize(int(fi.Size()))
		}
		f, err := fs.OpenFile("/"+e.Name(), os.O_RDONLY)
		if err != nil {
			return nil, err
		}
		return readAll(f, signature.MaxFileSize)
	}
	return nil, nil
}

// readAll reads all of f, which must be at most limit bytes, and closes it.
func readAll(f filesystem.File, limit int64) ([]byte, error) {
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%d bytes, more than the %d allowed", fi.Size(), limit)
	}
	// Never hand go-diskfs a buffer larger than what is left of the file:
	// its FAT reader (v1.9.4) then fills the buffer from the rest of the
	// cluster, past the end of the file.
	data, err := io.ReadAll(io.LimitReader(f, fi.Size()))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return data, nil
}
