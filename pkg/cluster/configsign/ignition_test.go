package configsign

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"
)

// A signed disk made with a Container Linux Config carries the machine
// config with its Ignition part, and the signature is over those bytes:
// what the node reads is what was signed.
func TestWriteDiskWithIgnition(t *testing.T) {
	dir, configPath, kf := setup(t, true)
	clc := filepath.Join(dir, "node.clc.yaml")
	require.NoError(t, os.WriteFile(clc, []byte("storage:\n  files:\n    - path: /etc/app.conf\n      filesystem: root\n      contents:\n        inline: listen=8080\n"), 0o644))

	img := filepath.Join(dir, "node.img")
	cfg, s, err := WriteDisk(configPath, img, kf.PrivatePath, WithIgnition(clc))
	require.NoError(t, err)
	require.NotNil(t, s)
	files, err := labeldisk.ReadDisk(img)
	require.NoError(t, err)
	_, err = signature.Verify(files.Signature, files.Config, cfg.TrustedPublicKeys())
	require.NoError(t, err)
	onDisk, err := machineconfig.Parse("disk", files.Config)
	require.NoError(t, err)
	assert.Equal(t, cfg.Digest(), onDisk.Digest())
	assert.Equal(t, uint64(2), onDisk.Generation)
	ign, err := ignitionspec.Parse([]byte(onDisk.Ignition))
	require.NoError(t, err)
	require.Len(t, ign.Files, 1)
	assert.Equal(t, "listen=8080", string(ign.Files[0].Contents))

	_, _, err = WriteDisk(configPath, img, "", WithIgnition(filepath.Join(dir, "missing.bu")))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, _, err = WriteDisk(configPath, img, "", WithIgnition(""))
	require.Error(t, err)
}

// blockStart finds where a literal block's text starts, and nothing for
// other scalars.
func TestBlockStart(t *testing.T) {
	line, col, ok := blockStart([]byte("a: 1\nignition: |\n    {\n     }\n"), "ignition")
	require.True(t, ok)
	assert.Equal(t, 2, line)
	assert.Equal(t, 4, col)
	for _, doc := range []string{"ignition: '{}'\n", "ignition: >\n  {}\n", "- a\n", "a: [\n"} {
		_, _, ok := blockStart([]byte(doc), "ignition")
		assert.False(t, ok, doc)
	}
}
