package machineconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// Two real public keys in signature's text form.
const (
	trustedKey      = "ed25519:Zr5+Myx6RTMyvZ0Kf32wVfXF7xoGraZtmLOftoEMRzo="
	otherTrustedKey = "ed25519:C1E62bSSQBXKCQLtB5BE06xdvsIwbwaUjBDajrbjny0="
)

func TestTrustedPublicKeys(t *testing.T) {
	c := validConfig()
	assert.Nil(t, c.TrustedPublicKeys())

	c.TrustedKeys = []string{trustedKey, "not a key", otherTrustedKey}
	got := c.TrustedPublicKeys()
	require.Len(t, got, 2, "the bad entry is left out")
	assert.Equal(t, trustedKey, got[0].String())
	assert.Equal(t, otherTrustedKey, got[1].String())
}

func TestTrustedKeysParseAndDigest(t *testing.T) {
	base := "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\n"
	none, err := Parse("machine.yaml", []byte(base))
	require.NoError(t, err)
	empty, err := Parse("machine.yaml", []byte(base+"trustedKeys: []\n"))
	require.NoError(t, err)
	assert.Nil(t, empty.TrustedKeys, "an empty list is the same as none")
	assert.Equal(t, none.Digest(), empty.Digest())

	one, err := Parse("machine.yaml", []byte(base+"trustedKeys: ['"+trustedKey+"']\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{trustedKey}, one.TrustedKeys)
	assert.NotEqual(t, none.Digest(), one.Digest(), "trusting a key changes the digest")

	data, err := one.Marshal()
	require.NoError(t, err)
	assert.Contains(t, string(data), "trustedKeys:\n  - "+trustedKey+"\n")
	again, err := Parse("canonical.yaml", data)
	require.NoError(t, err)
	assert.Equal(t, one, again)

	_, err = Parse("machine.yaml", []byte(base+"trustedKeys: [nope]\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "machine.yaml: $.trustedKeys[0]: \"nope\" is not a config signing key")

	// A signature by a listed key verifies against TrustedPublicKeys.
	priv, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	one.TrustedKeys = append(one.TrustedKeys, pub.String())
	require.NoError(t, one.Validate())
	signer, err := signature.Verify(signature.Sign(priv, data), data, one.TrustedPublicKeys())
	require.NoError(t, err)
	assert.Equal(t, pub, signer)
}
