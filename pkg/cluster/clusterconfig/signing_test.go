package clusterconfig

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
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// Every node config written verifies against the cluster's signing key,
// which every node trusts, beside the config and on its disk.
func TestWrittenConfigsVerify(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	w := writeAll(t, dir, secretsPath, false)
	s, err := clustersecrets.Load(secretsPath)
	require.NoError(t, err)
	clusterKey, err := s.SigningPublicKey()
	require.NoError(t, err)
	assert.Equal(t, clusterKey, w.SigningKey)
	assert.False(t, w.SigningKeyAdded, "new secrets come with their key")

	require.Len(t, w.Nodes, 3)
	for _, n := range w.Nodes {
		t.Run(n.Hostname, func(t *testing.T) {
			assert.Equal(t, filepath.Join(dir, n.Hostname+".yaml.sig"), n.Signature)
			data, err := os.ReadFile(n.Config)
			require.NoError(t, err)
			sig, err := os.ReadFile(n.Signature)
			require.NoError(t, err)

			c, err := machineconfig.Parse(n.Config, data)
			require.NoError(t, err)
			assert.Equal(t, []machineconfig.TrustedKey{{Key: clusterKey.String(), Purposes: []machineconfig.KeyPurpose{"config", "bundle"}}}, c.TrustedKeys)
			assert.Equal(t, uint64(1), c.Generation, "a cluster's configs start at generation 1")
			signer, err := signature.Verify(sig, data, c.TrustedPublicKeys())
			require.NoError(t, err, "the config does not verify against the key it trusts")
			assert.Equal(t, clusterKey, signer)

			files, err := labeldisk.ReadDisk(n.Disk)
			require.NoError(t, err)
			assert.Equal(t, data, files.Config)
			assert.Equal(t, sig, files.Signature)
			_, err = signature.Verify(files.Signature, files.Config, []signature.PublicKey{clusterKey})
			require.NoError(t, err)

			// The signature is for this node's config only.
			for _, other := range w.Nodes {
				if other.Hostname == n.Hostname {
					continue
				}
				otherData, err := os.ReadFile(other.Config)
				require.NoError(t, err)
				_, err = signature.Verify(sig, otherData, []signature.PublicKey{clusterKey})
				assert.ErrorIs(t, err, signature.ErrBadSignature)
			}
		})
	}
}

func TestRerunReproducesSignatures(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	a := writeAll(t, filepath.Join(dir, "a"), secretsPath, false)
	writeAll(t, filepath.Join(dir, "b"), secretsPath, false)
	for _, n := range a.Nodes {
		first, err := os.ReadFile(n.Signature)
		require.NoError(t, err)
		second, err := os.ReadFile(filepath.Join(dir, "b", n.Hostname+".yaml.sig"))
		require.NoError(t, err)
		assert.Equal(t, first, second, "%s: the signature differs between runs", n.Hostname)
	}
}

// Secrets saved before the signing key existed get one on the next run,
// which is saved and used from then on.
func TestOldSecretsGetSigningKey(t *testing.T) {
	dir := t.TempDir()
	secretsPath := filepath.Join(dir, "secrets.yaml")
	s, err := clustersecrets.Generate("lab", now, 24*time.Hour, nil)
	require.NoError(t, err)
	s.SigningKey = ""
	require.NoError(t, clustersecrets.Save(secretsPath, s))
	before, err := os.ReadFile(secretsPath)
	require.NoError(t, err)
	require.NotContains(t, string(before), "signingKey")

	w := writeAll(t, filepath.Join(dir, "a"), secretsPath, false)
	assert.True(t, w.SigningKeyAdded)
	assert.False(t, w.SecretsCreated)
	loaded, err := clustersecrets.Load(secretsPath)
	require.NoError(t, err)
	saved, err := loaded.SigningPublicKey()
	require.NoError(t, err, "the added key was not saved")
	assert.Equal(t, w.SigningKey, saved)
	hash, err := s.CACertHash()
	require.NoError(t, err)
	assert.Equal(t, hash, w.CACertHash, "adding the key changed the CA")

	again := writeAll(t, filepath.Join(dir, "b"), secretsPath, false)
	assert.False(t, again.SigningKeyAdded)
	assert.Equal(t, w.SigningKey, again.SigningKey)
}

func TestConfigsNeedSigningKey(t *testing.T) {
	s, err := clustersecrets.Generate("lab", now, time.Hour, nil)
	require.NoError(t, err)
	s.SigningKey = ""
	top := topology()
	_, err = Configs(&top, s)
	require.ErrorIs(t, err, clustersecrets.ErrNoSigningKey)
	assert.True(t, strings.Contains(err.Error(), "imagebuild config cluster"), err.Error())
}
