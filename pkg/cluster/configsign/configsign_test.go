package configsign

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/labeldisk"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

const config = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\ngeneration: 2\nhostname: node-1\n"

// setup writes a new key pair and a config, which trusts the new key when
// trust is set, in a temporary directory.
func setup(t *testing.T, trust bool) (dir, configPath string, kf *KeyFiles) {
	t.Helper()
	dir = t.TempDir()
	kf, err := Keygen(filepath.Join(dir, "node"))
	require.NoError(t, err)
	text := config
	if trust {
		text += "trustedKeys: [\"" + kf.Key.String() + "\"]\n"
	}
	configPath = filepath.Join(dir, "machine.yaml")
	require.NoError(t, os.WriteFile(configPath, []byte(text), 0o644))
	return dir, configPath, kf
}

func TestKeygen(t *testing.T) {
	dir, _, kf := setup(t, false)
	assert.Equal(t, filepath.Join(dir, "node.key"), kf.PrivatePath)
	assert.Equal(t, filepath.Join(dir, "node.pub"), kf.PublicPath)

	fi, err := os.Stat(kf.PrivatePath)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	priv, err := signature.LoadPrivateKey(kf.PrivatePath)
	require.NoError(t, err)
	assert.Equal(t, kf.Key, signature.PublicKeyOf(priv))

	pub, err := os.ReadFile(kf.PublicPath)
	require.NoError(t, err)
	assert.Equal(t, kf.Key.String()+"\n", string(pub))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 3, "temporary files left behind: %v", entries) // node.key, node.pub, machine.yaml
}

func TestKeygenRefusesToReplace(t *testing.T) {
	dir := t.TempDir()
	for _, existing := range []string{"a.key", "b.pub"} {
		path := filepath.Join(dir, existing)
		require.NoError(t, os.WriteFile(path, []byte("keep"), 0o600))
		name := filepath.Join(dir, existing[:1])
		_, err := Keygen(name)
		require.Error(t, err)
		assert.Contains(t, err.Error(), path)
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "keep", string(got))
	}
	assert.NoFileExists(t, filepath.Join(dir, "a.pub"))
	assert.NoFileExists(t, filepath.Join(dir, "b.key"))
}

func TestSignFile(t *testing.T) {
	for _, trust := range []bool{true, false} {
		_, configPath, kf := setup(t, trust)
		s, err := SignFile(configPath, kf.PrivatePath, "")
		require.NoError(t, err)
		assert.Equal(t, configPath+".sig", s.SignaturePath)
		assert.Equal(t, kf.Key, s.Key)
		assert.Equal(t, trust, s.KeyTrusted)
		assert.Equal(t, "node-1", s.Config.Hostname)

		sig, err := os.ReadFile(s.SignaturePath)
		require.NoError(t, err)
		data, err := os.ReadFile(configPath)
		require.NoError(t, err)
		signer, err := signature.Verify(sig, data, []signature.PublicKey{kf.Key})
		require.NoError(t, err)
		assert.Equal(t, kf.Key, signer)

		// Signing again replaces the signature.
		require.NoError(t, os.WriteFile(s.SignaturePath, []byte("stale"), 0o644))
		_, err = SignFile(configPath, kf.PrivatePath, "")
		require.NoError(t, err)
		again, err := os.ReadFile(s.SignaturePath)
		require.NoError(t, err)
		assert.Equal(t, sig, again)
	}
}

func TestSignFileRefuses(t *testing.T) {
	dir, configPath, kf := setup(t, false)
	invalid := filepath.Join(dir, "invalid.yaml")
	require.NoError(t, os.WriteFile(invalid, []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: Bad_Name\n"), 0o644))
	badKey := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(badKey, []byte("not a key"), 0o600))

	noGeneration := filepath.Join(dir, "nogen.yaml")
	require.NoError(t, os.WriteFile(noGeneration, []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-1\n"), 0o644))
	newer := filepath.Join(dir, "newer.yaml")
	require.NoError(t, os.WriteFile(newer, []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\ngeneration: 2\nhostname: node-2\n"), 0o644))

	tests := []struct {
		name, config, key, previous, msg string
	}{
		{"invalid config", invalid, kf.PrivatePath, "", "$.hostname"},
		{"missing config", filepath.Join(dir, "missing.yaml"), kf.PrivatePath, "", "missing.yaml"},
		{"unparsable key", configPath, badKey, "", badKey},
		{"public key as key", configPath, kf.PublicPath, "", kf.PublicPath},
		{"missing key", configPath, filepath.Join(dir, "missing.key"), "", "missing.key"},
		{"no generation", noGeneration, kf.PrivatePath, "",
			"nogen.yaml: generation: the config's generation is not above the one it changes: it has none, and a node takes a signed change only when its generation is above the highest it applied; add generation: N"},
		{"generation not above the previous", configPath, kf.PrivatePath, newer,
			"machine.yaml: generation: the config's generation is not above the one it changes: it is 2 and " + newer + " has 2; set generation: 3 or higher"},
		{"unreadable previous", configPath, kf.PrivatePath, filepath.Join(dir, "gone.yaml"), "gone.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SignFile(tt.config, tt.key, tt.previous)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.msg)
			assert.NoFileExists(t, tt.config+".sig")
		})
	}
}

func TestLoadKeyFromClusterSecrets(t *testing.T) {
	dir := t.TempDir()
	s, err := clustersecrets.Generate("lab", time.Now(), time.Hour, nil)
	require.NoError(t, err)
	path := filepath.Join(dir, "secrets.yaml")
	require.NoError(t, clustersecrets.Save(path, s))
	want, err := s.SigningPrivateKey()
	require.NoError(t, err)
	got, err := LoadKey(path)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	s.SigningKey = ""
	require.NoError(t, clustersecrets.Save(path, s))
	_, err = LoadKey(path)
	require.ErrorIs(t, err, clustersecrets.ErrNoSigningKey)
	assert.Contains(t, err.Error(), path)
}

func TestWriteDisk(t *testing.T) {
	dir, configPath, kf := setup(t, true)
	data, err := os.ReadFile(configPath)
	require.NoError(t, err)

	signedDisk := filepath.Join(dir, "signed.img")
	cfg, s, err := WriteDisk(configPath, signedDisk, kf.PrivatePath)
	require.NoError(t, err)
	assert.Equal(t, "node-1", cfg.Hostname)
	require.NotNil(t, s)
	assert.True(t, s.KeyTrusted)
	files, err := labeldisk.ReadDisk(signedDisk)
	require.NoError(t, err)
	assert.Equal(t, data, files.Config)
	_, err = signature.Verify(files.Signature, files.Config, cfg.TrustedPublicKeys())
	require.NoError(t, err)

	// A signed disk is a change stick: without a generation, every node
	// would refuse it.
	noGeneration := filepath.Join(dir, "nogen.yaml")
	require.NoError(t, os.WriteFile(noGeneration, []byte(config[:strings.Index(config, "generation")]+"hostname: node-1\n"), 0o644))
	_, _, err = WriteDisk(noGeneration, filepath.Join(dir, "nogen.img"), kf.PrivatePath)
	require.ErrorIs(t, err, ErrGeneration)
	assert.NoFileExists(t, filepath.Join(dir, "nogen.img"))

	plainDisk := filepath.Join(dir, "plain.img")
	_, s, err = WriteDisk(configPath, plainDisk, "")
	require.NoError(t, err)
	assert.Nil(t, s)
	files, err = labeldisk.ReadDisk(plainDisk)
	require.NoError(t, err)
	assert.Nil(t, files.Signature)

	badKey := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(badKey, []byte("-----BEGIN PRIVATE KEY-----\n"), 0o600))
	refused := filepath.Join(dir, "refused.img")
	_, _, err = WriteDisk(configPath, refused, badKey)
	require.Error(t, err)
	assert.Contains(t, err.Error(), badKey)
	assert.NoFileExists(t, refused)
}
