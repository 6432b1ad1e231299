package configdisk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/terrarium-os/terrarium/pkg/layout"
)

const sampleConfig = `apiVersion: terrarium.dev/v1alpha1
kind: MachineConfig
hostname: node-1
network:
  interfaces:
    - name: en*
      dhcp: true
`

func writeSample(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.img")
	if err := Write(path, []byte(sampleConfig)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return path
}

func TestWriteReadRoundTrip(t *testing.T) {
	path := writeSample(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != Size {
		t.Errorf("image size = %d, want %d", fi.Size(), Size)
	}
	if _, err := os.Stat(path + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.partial left behind: %v", path, err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if string(got) != sampleConfig {
		t.Errorf("Read = %q, want %q", got, sampleConfig)
	}
}

func TestWriteIsReproducible(t *testing.T) {
	a, b := writeSample(t), writeSample(t)
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(da, db) {
		t.Error("two images of the same config differ")
	}
}

func TestReadDoesNotChangeImage(t *testing.T) {
	path := writeSample(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("Read changed the image")
	}
}

func TestWriteReplacesExisting(t *testing.T) {
	path := writeSample(t)
	other := strings.Replace(sampleConfig, "node-1", "node-2", 1)
	if err := Write(path, []byte(other)); err != nil {
		t.Fatalf("Write over existing image: %v", err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != other {
		t.Errorf("Read = %q, want %q", got, other)
	}
}

func TestReadNoConfig(t *testing.T) {
	// A FAT disk labelled like a config disk but without machine.yaml.
	path := filepath.Join(t.TempDir(), "empty.img")
	d, err := diskfs.Create(path, Size, diskfs.SectorSizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: layout.LabelConfigFAT})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile("/other.txt", os.O_CREATE|os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	f.Close()
	d.Close()

	_, err = Read(path)
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("Read = %v, want ErrNoConfig", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the disk %s", err, path)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(filepath.Join(dir, "missing.img")); err == nil || errors.Is(err, ErrNoConfig) {
		t.Errorf("Read(missing) = %v, want an open error", err)
	}
	zeros := filepath.Join(dir, "zeros.img")
	if err := os.WriteFile(zeros, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(zeros); err == nil || errors.Is(err, ErrNoConfig) {
		t.Errorf("Read(zeros) = %v, want a no-filesystem error", err)
	}
}

func TestFsckAcceptsImage(t *testing.T) {
	fsck, err := exec.LookPath("fsck.fat")
	if err != nil {
		t.Fatal("fsck.fat not installed: run make deps")
	}
	path := writeSample(t)
	if out, err := exec.Command(fsck, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n %s: %v\n%s", path, err, out)
	}
}

func TestLabel(t *testing.T) {
	path := writeSample(t)

	// The boot sector of a FAT12/16 volume holds the volume label at
	// offset 43 (11 bytes, space padded) and the FS type at 54.
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(img[43:54]); got != layout.LabelConfigFAT {
		t.Errorf("boot sector label = %q, want %q", got, layout.LabelConfigFAT)
	}
	if got := strings.TrimSpace(string(img[54:62])); got != "FAT16" {
		t.Errorf("boot sector FS type = %q, want FAT16", got)
	}
	if sig := binary.LittleEndian.Uint16(img[510:512]); sig != 0xAA55 {
		t.Errorf("boot sector signature = %#x, want 0xaa55", sig)
	}

	blkid, err := exec.LookPath("blkid")
	if err != nil {
		t.Log("blkid not installed; checked the boot sector only")
		return
	}
	out, err := exec.Command(blkid, "-p", "-o", "value", "-s", "LABEL", path).CombinedOutput()
	if err != nil {
		t.Fatalf("blkid: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != layout.LabelConfigFAT {
		t.Errorf("blkid LABEL = %q, want %q", got, layout.LabelConfigFAT)
	}
}

func TestWriteFailureKeepsOldImage(t *testing.T) {
	path := writeSample(t)
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A config bigger than the 16 MiB filesystem cannot be written.
	if err := Write(path, bytes.Repeat([]byte("#"), int(Size)+1)); err == nil {
		t.Fatal("Write of a config larger than the disk succeeded")
	} else if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if _, err := os.Stat(path + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.partial left behind after a failed Write: %v", path, err)
	}
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, now) {
		t.Error("a failed Write changed the existing image")
	}
	if got, err := Read(path); err != nil || string(got) != sampleConfig {
		t.Errorf("Read after failed Write = %q, %v", got, err)
	}
}

func TestReadSizes(t *testing.T) {
	// Read returns exactly the file, whatever its size relative to sectors
	// and clusters (1 KiB here): no padding after the end of the file.
	sizes := []int{0, 1, 100, 511, 512, 513, 700, 1000, 1023, 1024, 1025, 1500, 2047, 2048, 2049, 3000, 5000, 100000, maxConfigSize - 7, maxConfigSize}
	for _, n := range sizes {
		cfg := make([]byte, n)
		for i := range cfg {
			cfg[i] = byte('a' + i%26)
		}
		path := filepath.Join(t.TempDir(), "config.img")
		if err := Write(path, cfg); err != nil {
			t.Fatalf("Write(%d bytes): %v", n, err)
		}
		got, err := Read(path)
		if err != nil {
			t.Errorf("Read(%d bytes): %v", n, err)
			continue
		}
		if !bytes.Equal(got, cfg) {
			t.Errorf("Read of a %d-byte file returned %d bytes (%d after trimming NULs)", n, len(got), len(bytes.TrimRight(got, "\x00")))
		}
	}
}

func TestReadTooLarge(t *testing.T) {
	// A config over the limit is an error, never silently truncated (a
	// truncated YAML file can still be valid, and mean something else).
	path := filepath.Join(t.TempDir(), "config.img")
	if err := Write(path, bytes.Repeat([]byte("#"), maxConfigSize+1)); err != nil {
		t.Fatal(err)
	}
	data, err := Read(path)
	if err == nil || errors.Is(err, ErrNoConfig) || data != nil {
		t.Errorf("Read = %d bytes, %v; want an error", len(data), err)
	} else if !strings.Contains(err.Error(), FileName) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the file and disk", err)
	}
}

func TestWriteIntoMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "config.img")
	if err := Write(path, []byte(sampleConfig)); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
	if _, err := os.Stat(path + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.partial left behind: %v", path, err)
	}
}

func TestWriteRemovesStalePartial(t *testing.T) {
	// A .partial left by an interrupted earlier run does not get in the way.
	path := filepath.Join(t.TempDir(), "config.img")
	if err := os.WriteFile(path+".partial", []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte(sampleConfig)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.partial left behind: %v", path, err)
	}
	if got, err := Read(path); err != nil || string(got) != sampleConfig {
		t.Errorf("Read = %q, %v", got, err)
	}
}
