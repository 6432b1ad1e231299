package upgrade_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func TestInspect(t *testing.T) {
	good := build(t, fixedKey(1))
	dir := t.TempDir()
	path := filepath.Join(dir, "terrarium-0.2.0.upgrade")
	require.NoError(t, os.WriteFile(path, good, 0o644))
	bad := bytes.Clone(good)
	bad[bytes.Index(bad, sampleParts()[2].data)] ^= 1
	badPath := filepath.Join(dir, "bad.upgrade")
	require.NoError(t, os.WriteFile(badPath, bad, 0o644))
	key := signature.PublicKeyOf(fixedKey(1))

	tests := []struct {
		name    string
		path    string
		trusted []signature.PublicKey
		want    error
		out     []string
	}{
		{"trusted", path, []signature.PublicKey{key}, nil, []string{
			"version        0.2.0\n", "upgrades from  0.1.0 or later\n", "compatible     terrarium\n",
			"kubernetes     v1.36.3\n", "etcd           3.6.4\n", "built at       2026-01-01T00:00:00Z\n",
			"signed by      key " + key.ID() + " (" + key.String() + "), not yet verified\n",
			"  rootfs.squashfs  rootfs     1.5 KiB  1500 bytes  sha256 ",
			"  vmlinuz          kernel     512 B    512 bytes   sha256 ",
			"signature good, by trusted key " + key.ID() + "; all 3 parts (2.5 KiB) match their sha256\n",
		}},
		{"no trusted key", path, nil, upgrade.ErrNoTrustedKeys, []string{"NOT checked against a trusted key"}},
		{"untrusted", path, []signature.PublicKey{signature.PublicKeyOf(fixedKey(2))}, upgrade.ErrUnknownKey, []string{"version        0.2.0\n", "NOT VERIFIED\n"}},
		{"flipped byte", badPath, []signature.PublicKey{key}, upgrade.ErrHashMismatch, []string{"NOT VERIFIED\n"}},
		{"flipped byte, no trusted key", badPath, nil, upgrade.ErrHashMismatch, []string{"NOT VERIFIED\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := upgrade.Inspect(context.Background(), &out, tt.path, tt.trusted)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
				assert.Contains(t, err.Error(), tt.path+": ")
			}
			for _, s := range tt.out {
				assert.Contains(t, out.String(), s)
			}
		})
	}
	err := upgrade.Inspect(context.Background(), &bytes.Buffer{}, filepath.Join(dir, "missing.upgrade"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestLoadTrustedKey(t *testing.T) {
	key := signature.PublicKeyOf(fixedKey(1))
	dir := t.TempDir()
	pub := filepath.Join(dir, "build.pub")
	require.NoError(t, os.WriteFile(pub, []byte(key.String()+"\n"), 0o644))
	priv := filepath.Join(dir, "build.key")
	pemBytes, err := signature.MarshalPrivateKey(fixedKey(1))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(priv, pemBytes, 0o600))

	for _, arg := range []string{key.String(), pub} {
		got, err := upgrade.LoadTrustedKey(arg)
		require.NoError(t, err, arg)
		assert.Equal(t, key, got)
	}
	_, err = upgrade.LoadTrustedKey(priv)
	assert.ErrorContains(t, err, "trusted key "+priv+": this is a PEM block")
	_, err = upgrade.LoadTrustedKey(filepath.Join(dir, "nope.pub"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = upgrade.LoadTrustedKey("ed25519:AAAA")
	assert.Error(t, err)
}
