package volume

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fatVolume writes files (paths with slashes make directories) to a FAT
// image made with go-diskfs.
func fatVolume(t *testing.T, files map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fat.img")
	d, err := diskfs.Create(p, 16<<20, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	defer d.Close()
	fs, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat16, VolumeLabel: "CIDATA"})
	require.NoError(t, err)
	for name, content := range files {
		if dir := filepath.Dir(name); dir != "." {
			require.NoError(t, fs.Mkdir("/"+dir))
		}
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		require.NoError(t, err)
		_, err = f.Write([]byte(content))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	return p
}

// isoVolume writes files to an ISO9660 image (Rock Ridge) made by xorriso.
func isoVolume(t *testing.T, files map[string]string) string {
	t.Helper()
	xorriso, err := exec.LookPath("xorriso")
	require.NoError(t, err, "xorriso is installed by scripts/deps.sh (make test)")
	src := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(content), 0o644))
	}
	p := filepath.Join(t.TempDir(), "v.iso")
	out, err := exec.Command(xorriso, "-as", "mkisofs", "-quiet", "-R", "-V", "config-2", "-o", p, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return p
}

func TestReadFile(t *testing.T) {
	files := map[string]string{
		"user-data":                       "#cloud-config\n",
		"openstack/latest/meta_data.json": `{"hostname":"a"}`,
	}
	for name, mk := range map[string]func(*testing.T, map[string]string) string{"fat": fatVolume, "iso9660": isoVolume} {
		t.Run(name, func(t *testing.T) {
			v, err := Open(mk(t, files))
			require.NoError(t, err)
			defer v.Close()
			for file, want := range files {
				got, err := v.ReadFile(file, 1<<10)
				require.NoError(t, err, file)
				assert.Equal(t, want, string(got))
			}
			_, err = v.ReadFile("meta-data", 1<<10)
			assert.ErrorIs(t, err, ErrNotFound)
			_, err = v.ReadFile("openstack/latest/network_data.json", 1<<10)
			assert.ErrorIs(t, err, ErrNotFound)
			_, err = v.ReadFile("nope/latest/x", 1<<10)
			assert.ErrorIs(t, err, ErrNotFound)
			_, err = v.ReadFile("user-data", 4)
			assert.ErrorIs(t, err, ErrTooLarge)
			_, err = v.ReadFile("openstack", 1<<10)
			assert.ErrorContains(t, err, "is a directory")
			_, err = v.ReadFile("../../etc/passwd", 1<<10)
			assert.ErrorIs(t, err, ErrNotFound, "a name never leaves the volume")
		})
	}
}

func TestOpenGarbage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "zeros")
	require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o644))
	_, err := Open(p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
}
