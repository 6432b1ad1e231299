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

	c.TrustedKeys = bare(trustedKey, "not a key", otherTrustedKey)
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
	assert.Equal(t, bare(trustedKey), one.TrustedKeys)
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
	one.TrustedKeys = append(one.TrustedKeys, TrustKey(pub))
	require.NoError(t, one.Validate())
	signer, err := signature.Verify(signature.Sign(priv, data), data, one.TrustedPublicKeys())
	require.NoError(t, err)
	assert.Equal(t, pub, signer)
}

// bare is trustedKeys of bare keys: each trusted for configs only.
func bare(keys ...string) []TrustedKey {
	out := make([]TrustedKey, len(keys))
	for i, k := range keys {
		out[i] = TrustedKey{Key: k}
	}
	return out
}

func TestTrustedKeyPurposes(t *testing.T) {
	base := "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\n"
	c, err := Parse("machine.yaml", []byte(base+"trustedKeys:\n"+
		"  - "+trustedKey+"\n"+
		"  - key: "+otherTrustedKey+"\n    purposes: [bundle, upgrade]\n"))
	require.NoError(t, err)
	require.Len(t, c.TrustedKeys, 2)

	keys := func(p KeyPurpose) []string {
		var out []string
		for _, k := range c.KeysFor(p) {
			out = append(out, k.String())
		}
		return out
	}
	assert.Equal(t, []string{trustedKey}, keys(PurposeConfig), "a bare key signs configs only")
	assert.Equal(t, []string{otherTrustedKey}, keys(PurposeBundle))
	assert.Equal(t, []string{otherTrustedKey}, keys(PurposeUpgrade))
	assert.Len(t, c.TrustedPublicKeys(), 2, "every key, whatever its purpose")

	// The canonical form keeps a bare key bare (old digests stay) and
	// writes the other as a mapping that parses back to the same config.
	data, err := c.Marshal()
	require.NoError(t, err)
	assert.Contains(t, string(data), "trustedKeys:\n  - "+trustedKey+"\n  - key: "+otherTrustedKey+"\n    purposes:\n      - bundle\n      - upgrade\n")
	again, err := Parse("canonical.yaml", data)
	require.NoError(t, err)
	assert.Equal(t, c, again)
	assert.Equal(t, c.Digest(), again.Digest())
}

func TestTrustedKeyPurposeProblems(t *testing.T) {
	base := "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\ntrustedKeys:\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown purpose", "  - key: " + trustedKey + "\n    purposes: [config, backups]\n",
			`$.trustedKeys[0].purposes[1]: "backups" is not a purpose; use config, bundle, upgrade`},
		{"purpose twice", "  - key: " + trustedKey + "\n    purposes: [bundle, bundle]\n",
			`$.trustedKeys[0].purposes[1]: "bundle" is listed twice`},
		{"unknown field", "  - key: " + trustedKey + "\n    purpose: [bundle]\n",
			`field "purpose" is not known in a trusted key; the fields are key and purposes`},
		{"bad key in a mapping", "  - key: nope\n    purposes: [bundle]\n",
			`$.trustedKeys[0].key: "nope" is not a config signing key`},
		{"same key twice with other purposes", "  - " + trustedKey + "\n  - key: " + trustedKey + "\n    purposes: [bundle]\n",
			`$.trustedKeys[1].key: same key as $.trustedKeys[0]; list a key once, with all its purposes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("machine.yaml", []byte(base+tt.yaml))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestBundleKeys(t *testing.T) {
	c := validConfig()
	c.TrustedKeys = []TrustedKey{{Key: trustedKey}, {Key: otherTrustedKey, Purposes: []KeyPurpose{PurposeBundle}}}
	require.Len(t, c.BundleKeys(), 1)
	assert.Equal(t, otherTrustedKey, c.BundleKeys()[0].String())

	// registry.signedBundlesOnly predates purposes: it named bare keys
	// for bundles, and keeps doing so.
	c.Registry = &Registry{SignedBundlesOnly: true}
	require.Len(t, c.BundleKeys(), 2)
}
