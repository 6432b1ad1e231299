package media

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/host"
)

func TestFind(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	b := &Block{Host: h, Dir: filepath.Join(h.Root, "run/media")}
	_, ok := b.Find("TERRA-SUPPORT", "TERRA-SUPPO")
	assert.False(t, ok, "nothing inserted")

	require.NoError(t, os.MkdirAll(h.Path("/dev/disk/by-label"), 0o755))
	require.NoError(t, os.WriteFile(h.Path("/dev/sdb1"), nil, 0o600))
	require.NoError(t, os.Symlink("../../sdb1", h.Path("/dev/disk/by-label/TERRA-SUPPO")))
	m, ok := b.Find("TERRA-SUPPORT", "TERRA-SUPPO")
	require.True(t, ok)
	assert.Equal(t, Medium{Device: "/dev/sdb1", Label: "TERRA-SUPPO", Insertion: "/dev/sdb1"}, m)

	// A dangling link (the stick was pulled) is no medium.
	require.NoError(t, os.Remove(h.Path("/dev/sdb1")))
	_, ok = b.Find("TERRA-SUPPORT", "TERRA-SUPPO")
	assert.False(t, ok)
}

// Each insertion is told apart by its disk's sequence number, read for a
// partition from its disk's directory in sysfs.
func TestFindInsertion(t *testing.T) {
	h := &host.Host{Root: t.TempDir()}
	b := &Block{Host: h, Dir: filepath.Join(h.Root, "run/media")}
	require.NoError(t, os.MkdirAll(h.Path("/dev/disk/by-label"), 0o755))
	require.NoError(t, os.WriteFile(h.Path("/dev/sdb1"), nil, 0o600))
	require.NoError(t, os.Symlink("../../sdb1", h.Path("/dev/disk/by-label/TERRA-UPGRA")))

	m, ok := b.Find("TERRA-UPGRA")
	require.True(t, ok)
	assert.Equal(t, "/dev/sdb1", m.Insertion, "no sysfs: the device alone")

	disk := h.Path("/sys/devices/pci0000:00/usb1/1-1/block/sdb")
	require.NoError(t, os.MkdirAll(filepath.Join(disk, "sdb1"), 0o755))
	require.NoError(t, os.MkdirAll(h.Path("/sys/class/block"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(disk, "sdb1"), h.Path("/sys/class/block/sdb1")))
	for _, seq := range []string{"17", "18"} {
		require.NoError(t, os.WriteFile(filepath.Join(disk, "diskseq"), []byte(seq+"\n"), 0o444))
		m, ok = b.Find("TERRA-UPGRA")
		require.True(t, ok)
		assert.Equal(t, "/dev/sdb1#"+seq, m.Insertion)
	}
}
