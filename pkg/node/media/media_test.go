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
	assert.Equal(t, Medium{Device: "/dev/sdb1", Label: "TERRA-SUPPO"}, m)

	// A dangling link (the stick was pulled) is no medium.
	require.NoError(t, os.Remove(h.Path("/dev/sdb1")))
	_, ok = b.Find("TERRA-SUPPORT", "TERRA-SUPPO")
	assert.False(t, ok)
}
