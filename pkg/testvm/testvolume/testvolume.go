// Package testvolume makes config volumes for tests: FAT images written
// with go-diskfs and ISO9660 images (Rock Ridge) written by xorriso, as
// cloud-localds, genisoimage and Nova make them. Paths with slashes make
// directories.
package testvolume

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/require"
)

// Maker writes a volume labelled label holding files to dir/label, as udev
// links a labelled volume under /dev/disk/by-label, and returns its path.
type Maker func(t *testing.T, dir, label string, files map[string]string) string

// Both are the two kinds of config volume, by name.
var Both = map[string]Maker{"fat": FAT, "iso9660": ISO}

// FAT makes a FAT16 volume with go-diskfs.
func FAT(t *testing.T, dir, label string, files map[string]string) string {
	t.Helper()
	p := filepath.Join(dir, label)
	d, err := diskfs.Create(p, 16<<20, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	defer d.Close()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: label})
	require.NoError(t, err)
	made := map[string]bool{}
	for name, content := range files {
		if dir := path.Dir(name); dir != "." && !made[dir] {
			require.NoError(t, fs.Mkdir("/"+dir))
			made[dir] = true
		}
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		require.NoError(t, err)
		_, err = f.Write([]byte(content))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	return p
}

// ISO makes an ISO9660 volume (Rock Ridge) with xorriso, which `make test`
// installs (scripts/deps.sh).
func ISO(t *testing.T, dir, label string, files map[string]string) string {
	t.Helper()
	xorriso, err := exec.LookPath("xorriso")
	require.NoError(t, err, "xorriso is installed by scripts/deps.sh (make test)")
	src := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(content), 0o644))
	}
	p := filepath.Join(dir, label)
	out, err := exec.Command(xorriso, "-as", "mkisofs", "-quiet", "-R", "-V", label, "-o", p, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return p
}
