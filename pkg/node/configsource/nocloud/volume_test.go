package nocloud

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/require"
)

// makeVolume writes a volume holding files to dir/label, as udev links a
// labelled volume under /dev/disk/by-label.
type makeVolume func(t *testing.T, dir, label string, files map[string]string) string

// fatVolume makes a FAT16 volume with go-diskfs.
func fatVolume(t *testing.T, dir, label string, files map[string]string) string {
	t.Helper()
	p := filepath.Join(dir, label)
	d, err := diskfs.Create(p, 16<<20, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	defer d.Close()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: label})
	require.NoError(t, err)
	for name, content := range files {
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		require.NoError(t, err)
		_, err = f.Write([]byte(content))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	return p
}

// isoVolume makes an ISO9660 volume (Rock Ridge) with xorriso, as
// cloud-localds and genisoimage do.
func isoVolume(t *testing.T, dir, label string, files map[string]string) string {
	t.Helper()
	xorriso, err := exec.LookPath("xorriso")
	require.NoError(t, err, "xorriso is installed by scripts/deps.sh (make test)")
	src := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(content), 0o644))
	}
	p := filepath.Join(dir, label)
	out, err := exec.Command(xorriso, "-as", "mkisofs", "-quiet", "-R", "-V", label, "-o", p, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return p
}
