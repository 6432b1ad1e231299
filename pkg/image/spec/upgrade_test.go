package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

func TestUpgradeSettings(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	pemKey, err := signature.MarshalPrivateKey(key)
	require.NoError(t, err)
	_, other, err := signature.GenerateKey()
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		edit    func(s *Spec, dir string)
		wantErr string
	}{
		{"none", func(s *Spec, dir string) {}, ""},
		{"signing key and a next key", func(s *Spec, dir string) {
			s.Upgrade = Upgrade{SigningKey: "build.key", TrustedKeys: []string{other.String()}, MinFromVersion: "0.1.0"}
		}, ""},
		{"missing key", func(s *Spec, dir string) { s.Upgrade.SigningKey = "nope.key" },
			`$.upgrade.signingKey: "nope.key" cannot be read`},
		{"not a key", func(s *Spec, dir string) { s.Upgrade.SigningKey = "terrarium.yaml" },
			`$.upgrade.signingKey: "terrarium.yaml" is not an ed25519 signing key`},
		{"bad trusted key", func(s *Spec, dir string) { s.Upgrade.TrustedKeys = []string{"rsa:abc"} },
			`$.upgrade.trustedKeys[0]:`},
		{"bad min version", func(s *Spec, dir string) { s.Upgrade.MinFromVersion = "one" },
			`$.upgrade.minFromVersion:`},
		{"version not semantic", func(s *Spec, dir string) { s.Upgrade.SigningKey = "build.key"; s.Version = "latest" },
			`$.version:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "terrarium.yaml"), []byte("kind: BuildSpec\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "build.key"), pemKey, 0o600))
			s := &Spec{Name: "terrarium", Version: "0.2.0", dir: dir}
			tc.edit(s, dir)
			var p strictyaml.Problems
			s.validateUpgrade(&p, strictyaml.Root().Field("upgrade"))
			if tc.wantErr == "" {
				assert.NoError(t, p.Err())
				keys, err := s.UpgradeKeys()
				require.NoError(t, err)
				if s.Upgrade.SigningKey != "" {
					assert.Equal(t, []signature.PublicKey{pub, other}, keys, "the signing key's public half first, then the next")
				}
				return
			}
			assert.ErrorContains(t, p.Err(), tc.wantErr)
		})
	}
}
