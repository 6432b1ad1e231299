package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// writeUpgradeFile writes a small upgrade file of version signed with key
// to dir and returns its path.
func writeUpgradeFile(t *testing.T, dir string, key ed25519.PrivateKey, version string) string {
	t.Helper()
	var parts []upgrade.Part
	for _, p := range []struct {
		name string
		role upgrade.Role
	}{{"rootfs.squashfs", upgrade.RoleRootfs}, {"vmlinuz", upgrade.RoleKernel}, {"initrd.img", upgrade.RoleInitramfs}} {
		data := []byte(p.name + " of " + version)
		parts = append(parts, upgrade.Part{Name: p.name, Role: p.role, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}})
	}
	path := filepath.Join(dir, "terrarium-"+version+".upgrade")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = upgrade.Write(context.Background(), f, upgrade.Manifest{Version: version, Compatible: "terrarium", MinFromVersion: "0.0.0",
		BuiltAt: "2026-01-01T00:00:00Z"}, parts, key)
	require.NoError(t, err)
	return path
}

// `imagebuild upgrade force --key KEY FILE` writes FILE.force: an
// instruction forcing that file, signed with the key, that a node
// trusting the key verifies; a file cut short gets none.
func TestUpgradeForce(t *testing.T) {
	dir := t.TempDir()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	pem, err := signature.MarshalPrivateKey(key)
	require.NoError(t, err)
	keyPath := filepath.Join(dir, "build.key")
	require.NoError(t, os.WriteFile(keyPath, pem, 0o600))
	file := writeUpgradeFile(t, dir, key, "0.2.0")

	cmd := upgradeCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"force", "--key", keyPath, "--valid-for", "48h", file})
	require.NoError(t, cmd.Execute())
	assert.Contains(t, out.String(), "wrote "+file+".force: force 0.2.0 (sha256:")
	assert.NotContains(t, out.String(), "note:", "one key signs both")

	b, err := os.ReadFile(file + ".force")
	require.NoError(t, err)
	in, signer, err := upgrade.VerifyInstruction(b, []signature.PublicKey{pub})
	require.NoError(t, err)
	assert.Equal(t, pub, signer)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	uf, err := upgrade.Open(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	manifest, _ := uf.SignedManifest()
	require.NoError(t, in.Check(upgrade.Digest(manifest), "0.2.0", time.Now().Add(47*time.Hour)))
	assert.ErrorIs(t, in.Check(upgrade.Digest(manifest), "0.2.0", time.Now().Add(49*time.Hour)), upgrade.ErrInstructionExpired)

	// Another key than the file's: said, and written to -o.
	other, _, err := signature.GenerateKey()
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, writeForce(context.Background(), &out, file, other, time.Now().Add(time.Hour), filepath.Join(dir, "force.sig")))
	assert.Contains(t, out.String(), "the nodes must trust both for upgrades")
	assert.FileExists(t, filepath.Join(dir, "force.sig"))

	// A damaged file is refused, and nothing is written.
	require.NoError(t, os.WriteFile(file, data[:len(data)-600], 0o644))
	err = writeForce(context.Background(), &out, file, key, time.Now().Add(time.Hour), filepath.Join(dir, "cut.force"))
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "cut short") || strings.Contains(err.Error(), "not an upgrade file"), err.Error())
	assert.NoFileExists(t, filepath.Join(dir, "cut.force"))

	cmd = upgradeCmd()
	cmd.SetArgs([]string{"force", file})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	assert.ErrorContains(t, cmd.Execute(), "--key is required")
}
