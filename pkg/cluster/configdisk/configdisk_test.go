package configdisk

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
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
	require.NoError(t, Write(path, []byte(sampleConfig)))
	return path
}

// sampleSignature signs sampleConfig with a fresh key.
func sampleSignature(t *testing.T) []byte {
	t.Helper()
	key, _, err := signature.GenerateKey()
	require.NoError(t, err)
	return signature.Sign(key, []byte(sampleConfig))
}

func writeSignedSample(t *testing.T) (string, []byte) {
	t.Helper()
	sig := sampleSignature(t)
	path := filepath.Join(t.TempDir(), "config.img")
	require.NoError(t, WriteSigned(path, []byte(sampleConfig), sig))
	return path, sig
}

// makeDisk writes a FAT disk labelled like a config disk holding files,
// made with go-diskfs directly rather than Write.
func makeDisk(t *testing.T, files map[string][]byte, dirs ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "handmade.img")
	d, err := diskfs.Create(path, Size, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	defer d.Close()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: layout.LabelConfigFAT})
	require.NoError(t, err)
	for _, dir := range dirs {
		require.NoError(t, fs.Mkdir("/"+dir))
	}
	for name, data := range files {
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	return path
}

func TestWriteReadRoundTrip(t *testing.T) {
	path := writeSample(t)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.EqualValues(t, Size, fi.Size())
	assert.NoFileExists(t, path+".partial")
	got, err := readConfig(path)
	require.NoError(t, err)
	assert.Equal(t, sampleConfig, string(got))

	files, err := readBack(path)
	require.NoError(t, err)
	assert.Equal(t, sampleConfig, string(files.Config))
	assert.Nil(t, files.Signature, "an unsigned disk has no signature")
}

func TestWriteSignedRoundTrip(t *testing.T) {
	path, sig := writeSignedSample(t)
	files, err := readBack(path)
	require.NoError(t, err)
	assert.Equal(t, sampleConfig, string(files.Config))
	assert.Equal(t, sig, files.Signature)

	got, err := readConfig(path)
	require.NoError(t, err)
	assert.Equal(t, sampleConfig, string(got), "Read ignores the signature")
}

func TestWriteSignedNilIsWrite(t *testing.T) {
	signedNil := filepath.Join(t.TempDir(), "config.img")
	require.NoError(t, WriteSigned(signedNil, []byte(sampleConfig), nil))
	a, err := os.ReadFile(writeSample(t))
	require.NoError(t, err)
	b, err := os.ReadFile(signedNil)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(a, b), "WriteSigned(nil) and Write give different images")
}

func TestWriteIsReproducible(t *testing.T) {
	da, err := os.ReadFile(writeSample(t))
	require.NoError(t, err)
	db, err := os.ReadFile(writeSample(t))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(da, db), "two images of the same config differ")

	sig := sampleSignature(t)
	var signed [][]byte
	for range 2 {
		path := filepath.Join(t.TempDir(), "config.img")
		require.NoError(t, WriteSigned(path, []byte(sampleConfig), sig))
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		signed = append(signed, data)
	}
	assert.True(t, bytes.Equal(signed[0], signed[1]), "two images of the same signed config differ")
}

func TestReadDoesNotChangeImage(t *testing.T) {
	path, _ := writeSignedSample(t)
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = readBack(path)
	require.NoError(t, err)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "ReadFiles changed the image")
}

func TestWriteReplacesExisting(t *testing.T) {
	path, _ := writeSignedSample(t)
	other := strings.Replace(sampleConfig, "node-1", "node-2", 1)
	require.NoError(t, Write(path, []byte(other)))
	files, err := readBack(path)
	require.NoError(t, err)
	assert.Equal(t, other, string(files.Config))
	assert.Nil(t, files.Signature, "the old disk's signature survived an unsigned Write")
}

func TestReadNoConfig(t *testing.T) {
	// A FAT disk labelled like a config disk but without machine.yaml.
	path := makeDisk(t, map[string][]byte{"other.txt": []byte("hello"), SignatureFileName: []byte("sig")})
	_, err := readConfig(path)
	require.ErrorIs(t, err, labeldisk.ErrNoConfig)
	assert.Contains(t, err.Error(), path)
	_, err = readBack(path)
	require.ErrorIs(t, err, labeldisk.ErrNoConfig)
}

func TestReadFilesSignature(t *testing.T) {
	sig := sampleSignature(t)
	tests := []struct {
		name  string
		files map[string][]byte
		dirs  []string
		want  []byte // the signature; nil: none
		err   error  // errors.Is target; nil: no error
		msg   string // in the error
	}{
		{name: "none", files: map[string][]byte{FileName: []byte(sampleConfig)}},
		{name: "signed", files: map[string][]byte{FileName: []byte(sampleConfig), SignatureFileName: sig}, want: sig},
		{name: "name in upper case", files: map[string][]byte{FileName: []byte(sampleConfig), "MACHINE.YAML.SIG": sig}, want: sig},
		{name: "empty signature file", files: map[string][]byte{FileName: []byte(sampleConfig), SignatureFileName: {}}, want: []byte{}},
		{name: "signature at the limit", files: map[string][]byte{FileName: []byte(sampleConfig), SignatureFileName: bytes.Repeat([]byte("s"), signature.MaxFileSize)},
			want: bytes.Repeat([]byte("s"), signature.MaxFileSize)},
		{name: "signature too large", files: map[string][]byte{FileName: []byte(sampleConfig), SignatureFileName: bytes.Repeat([]byte("s"), signature.MaxFileSize+1)},
			err: volume.ErrTooLarge, msg: "4097 bytes"},
		{name: "signature is a directory", files: map[string][]byte{FileName: []byte(sampleConfig)}, dirs: []string{SignatureFileName},
			msg: "is a directory"},
		{name: "other files only", files: map[string][]byte{FileName: []byte(sampleConfig), "machine.yaml.sig.bak": sig, "notes.sig": sig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := makeDisk(t, tt.files, tt.dirs...)
			files, err := readBack(path)
			if tt.err == nil && tt.msg == "" {
				require.NoError(t, err)
				assert.Equal(t, sampleConfig, string(files.Config))
				assert.Equal(t, tt.want, files.Signature)
				assert.Equal(t, tt.want == nil, files.Signature == nil, "Signature is nil exactly when there is no file")
				return
			}
			require.Error(t, err)
			if tt.err != nil {
				assert.ErrorIs(t, err, tt.err)
			}
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), SignatureFileName)
		})
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := readConfig(filepath.Join(dir, "missing.img"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, labeldisk.ErrNoConfig)

	zeros := filepath.Join(dir, "zeros.img")
	require.NoError(t, os.WriteFile(zeros, make([]byte, 1<<20), 0o644))
	_, err = readBack(zeros)
	require.Error(t, err)
	assert.NotErrorIs(t, err, labeldisk.ErrNoConfig)
	assert.Contains(t, err.Error(), "no FAT or ISO9660 filesystem")
}

func TestFsckAcceptsImage(t *testing.T) {
	fsck, err := exec.LookPath("fsck.fat")
	require.NoError(t, err, "fsck.fat not installed: run make deps")
	signed, _ := writeSignedSample(t)
	for _, path := range []string{writeSample(t), signed} {
		out, err := exec.Command(fsck, "-n", path).CombinedOutput()
		assert.NoError(t, err, "fsck.fat -n %s:\n%s", path, out)
	}
}

func TestLabel(t *testing.T) {
	path := writeSample(t)

	// The boot sector of a FAT12/16 volume holds the volume label at
	// offset 43 (11 bytes, space padded) and the FS type at 54.
	img, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, layout.LabelConfigFAT, string(img[43:54]), "boot sector label")
	assert.Equal(t, "FAT16", strings.TrimSpace(string(img[54:62])), "boot sector FS type")
	assert.Equal(t, uint16(0xAA55), binary.LittleEndian.Uint16(img[510:512]), "boot sector signature")

	blkid, err := exec.LookPath("blkid")
	if err != nil {
		t.Log("blkid not installed; checked the boot sector only")
		return
	}
	out, err := exec.Command(blkid, "-p", "-o", "value", "-s", "LABEL", path).CombinedOutput()
	require.NoError(t, err, "blkid:\n%s", out)
	assert.Equal(t, layout.LabelConfigFAT, strings.TrimSpace(string(out)), "blkid LABEL")
}

func TestWriteFailureKeepsOldImage(t *testing.T) {
	path := writeSample(t)
	old, err := os.ReadFile(path)
	require.NoError(t, err)

	// A config bigger than the 16 MiB filesystem cannot be written, nor a
	// signature over the limit.
	for name, write := range map[string]func() error{
		"config too large":    func() error { return Write(path, bytes.Repeat([]byte("#"), int(Size)+1)) },
		"signature too large": func() error { return WriteSigned(path, []byte(sampleConfig), make([]byte, signature.MaxFileSize+1)) },
	} {
		t.Run(name, func(t *testing.T) {
			err := write()
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.NoFileExists(t, path+".partial")
			now, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(old, now), "a failed write changed the existing image")
			got, err := readConfig(path)
			require.NoError(t, err)
			assert.Equal(t, sampleConfig, string(got))
		})
	}
	err = WriteSigned(path, []byte(sampleConfig), make([]byte, signature.MaxFileSize+1))
	assert.ErrorIs(t, err, ErrSignatureTooLarge)
}

func TestReadSizes(t *testing.T) {
	// ReadFiles returns exactly the files, whatever their sizes relative to
	// sectors and clusters (1 KiB here): no padding after the end of a file.
	sizes := []int{0, 1, 100, 511, 512, 513, 700, 1000, 1023, 1024, 1025, 1500, 2047, 2048, 2049, 3000, 5000, 100000, labeldisk.MaxConfigSize - 7, labeldisk.MaxConfigSize}
	sigSizes := []int{1, 170, 511, 512, 513, 1023, 1024, 1025, 2048, 4095, 4096}
	for i, n := range sizes {
		cfg := pattern(n, 'a')
		sig := pattern(sigSizes[i%len(sigSizes)], 'A')
		path := filepath.Join(t.TempDir(), "config.img")
		require.NoError(t, WriteSigned(path, cfg, sig), "WriteSigned(%d, %d bytes)", n, len(sig))
		files, err := readBack(path)
		if !assert.NoError(t, err, "readBack(%d bytes)", n) {
			continue
		}
		assert.True(t, bytes.Equal(files.Config, cfg), "a %d-byte config read back as %d bytes", n, len(files.Config))
		assert.True(t, bytes.Equal(files.Signature, sig), "a %d-byte signature read back as %d bytes", len(sig), len(files.Signature))
	}
}

// pattern returns n bytes cycling through the alphabet from first.
func pattern(n int, first byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = first + byte(i%26)
	}
	return b
}

func TestReadTooLarge(t *testing.T) {
	// A config over the limit is an error, never silently truncated (a
	// truncated YAML file can still be valid, and mean something else).
	path := filepath.Join(t.TempDir(), "config.img")
	require.NoError(t, Write(path, bytes.Repeat([]byte("#"), labeldisk.MaxConfigSize+1)))
	data, err := readConfig(path)
	require.Error(t, err)
	assert.NotErrorIs(t, err, labeldisk.ErrNoConfig)
	assert.Nil(t, data)
	assert.Contains(t, err.Error(), FileName)
	assert.Contains(t, err.Error(), path)
}

func TestWriteIntoMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "config.img")
	require.Error(t, Write(path, []byte(sampleConfig)))
	assert.NoFileExists(t, path+".partial")
}

func TestWriteRemovesStalePartial(t *testing.T) {
	// A .partial left by an interrupted earlier run does not get in the way.
	path := filepath.Join(t.TempDir(), "config.img")
	require.NoError(t, os.WriteFile(path+".partial", []byte("stale"), 0o644))
	require.NoError(t, Write(path, []byte(sampleConfig)))
	assert.NoFileExists(t, path+".partial")
	got, err := readConfig(path)
	require.NoError(t, err)
	assert.Equal(t, sampleConfig, string(got))
}

// readBack reads a disk the way a node does (labeldisk, the node's reader):
// what Write writes, a node reads.
func readBack(path string) (*configsource.Found, error) { return labeldisk.ReadDisk(path) }

func readConfig(path string) ([]byte, error) {
	f, err := labeldisk.ReadDisk(path)
	if err != nil {
		return nil, err
	}
	return f.Config, nil
}
