package firstboot

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMappedFrom(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, p), 0o755))
	}
	// sysfs's /sys/dev/block/MAJ:MIN links to the device's directory;
	// a directory stands in for it.
	mk("sys/dev/block/254:0/slaves/vda4")
	dev, err := under(root, "/dev/mapper/terrarium-state", 254, 0)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "dev/vda4"), dev)

	_, err = under(root, "/dev/mapper/terrarium-state", 254, 1)
	assert.ErrorContains(t, err, "find the partition under /dev/mapper/terrarium-state")

	mk("sys/dev/block/254:0/slaves/vdb1")
	_, err = under(root, "/dev/mapper/terrarium-state", 254, 0)
	assert.ErrorContains(t, err, "2 devices under it, want 1")

	// The mapped name must be a block device.
	mk("dev/mapper")
	require.NoError(t, os.WriteFile(filepath.Join(root, "dev/mapper/terrarium-state"), nil, 0o600))
	_, err = mappedFrom(root, "terrarium-state")
	assert.ErrorContains(t, err, "is not a block device")
	_, err = mappedFrom(root, "other")
	assert.ErrorContains(t, err, "find TERRA-STATE's encrypted volume")
}
