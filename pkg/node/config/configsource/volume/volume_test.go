package volume

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/testvm/testvolume"
)

func TestReadFile(t *testing.T) {
	files := map[string]string{
		"user-data":                       "#cloud-config\n",
		"openstack/latest/meta_data.json": `{"hostname":"a"}`,
	}
	for name, mk := range testvolume.Both {
		t.Run(name, func(t *testing.T) {
			v, err := Open(mk(t, t.TempDir(), "config-2", files))
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

// An ISO 9660 image on a block device of 512-byte blocks (attached as a
// disk, not a CD-ROM) is read in ISO 9660's own blocks.
func TestISOOnADiskOfSmallBlocks(t *testing.T) {
	img := testvolume.ISO(t, t.TempDir(), "cidata", map[string]string{"meta-data": "instance-id: i-1\n"})
	f, err := os.Open(img)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	// What diskfs.Open makes of a block device that says 512-byte blocks.
	d := &disk.Disk{Backend: file.New(f, true), Size: fi.Size(), LogicalBlocksize: 512, PhysicalBlocksize: 512, DefaultBlocks: false}
	_, err = d.GetFilesystem(0)
	require.Error(t, err, "go-diskfs alone does not find it")
	fs, err := filesystemOf(d)
	require.NoError(t, err)
	assert.Equal(t, filesystem.TypeISO9660, fs.Type())
}
