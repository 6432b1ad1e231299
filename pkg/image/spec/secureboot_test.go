package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
)

func TestSecureBootSpec(t *testing.T) {
	dir := t.TempDir()
	other, err := secureboot.Generate(filepath.Join(dir, "other"), "vendor")
	require.NoError(t, err)
	_, err = secureboot.Generate(filepath.Join(dir, "keys"), "plant-7")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "empty"), 0o700))
	// A vendor's CA as Microsoft publishes its own: DER.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vendor-ca.der"), other.Key(secureboot.DB).Cert.Raw, 0o644))
	const msOwner = "77fa9abd-0359-4d32-bd60-28f4e78f784b"

	tests := []struct {
		name       string
		add        string
		wantEnroll string
		problems   []string
	}{
		{name: "off by default", add: ""},
		{name: "keys, enroll defaulted", add: "secureBoot:\n  keys: keys\n", wantEnroll: EnrollIfSafe},
		{name: "keys, enroll force", add: "secureBoot:\n  keys: keys\n  enroll: force\n", wantEnroll: EnrollForce},
		{name: "keys, enroll off", add: "secureBoot:\n  keys: keys\n  enroll: off\n", wantEnroll: EnrollOff},
		{name: "an extra db certificate", add: "secureBoot:\n  keys: keys\n  extraDB: [{cert: vendor-ca.der, owner: " + msOwner + "}]\n", wantEnroll: EnrollIfSafe},
		{
			name: "an extra db certificate that is no certificate", add: "secureBoot:\n  keys: keys\n  extraDB: [{cert: keys/owner.guid, owner: " + msOwner + "}]\n",
			problems: []string{"secureBoot.extraDB[0]", "owner.guid: not a PEM or DER certificate"},
		},
		{
			name: "an extra db certificate without its owner", add: "secureBoot:\n  keys: keys\n  extraDB: [{cert: vendor-ca.der, owner: microsoft}]\n",
			problems: []string{"secureBoot.extraDB[0]", "vendor-ca.der's owner"},
		},
		{
			name: "extra db certificates not enrolled", add: "secureBoot:\n  keys: keys\n  enroll: off\n  extraDB: [{cert: vendor-ca.der, owner: " + msOwner + "}]\n",
			problems: []string{"secureBoot.extraDB", "enroll is off"},
		},
		{
			name: "enroll without keys", add: "secureBoot:\n  enroll: force\n",
			problems: []string{"secureBoot.enroll", "secureBoot.keys is not"},
		},
		{
			name: "unknown enroll", add: "secureBoot:\n  keys: keys\n  enroll: always\n",
			problems: []string{"secureBoot.enroll", `"always"`, "if-safe, manual, force, off"},
		},
		{
			name: "no key set there", add: "secureBoot:\n  keys: empty\n",
			problems: []string{"secureBoot.keys", "owner.guid", "restore the key set"},
		},
		{name: "with an iso", add: "secureBoot:\n  keys: keys\noutputs: [qcow2, iso]\n", wantEnroll: EnrollIfSafe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(writeFile(t, dir, "spec.yaml", minimalSpec+tt.add))
			if len(tt.problems) > 0 {
				require.Error(t, err)
				for _, want := range tt.problems {
					assert.ErrorContains(t, err, want)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantEnroll != "", s.SecureBootOn())
			assert.Equal(t, tt.wantEnroll, s.SecureBoot.Enroll)
			if s.SecureBootOn() {
				ks, err := s.SecureBootKeys()
				require.NoError(t, err)
				assert.Equal(t, filepath.Join(dir, "keys"), ks.Dir, "keys resolve against the spec's directory")
				extra, err := s.SecureBootExtraDB()
				require.NoError(t, err)
				require.Len(t, extra, len(s.SecureBoot.ExtraDB))
				for _, e := range extra {
					assert.Equal(t, msOwner, e.Owner.String())
					assert.True(t, e.Cert.Equal(other.Key(secureboot.DB).Cert))
				}
			}
		})
	}
}

// TestSecureBootKeysFromBase: a spec that extends one with secureBoot gets
// the base's key set, resolved against the base's file.
func TestSecureBootKeysFromBase(t *testing.T) {
	base := t.TempDir()
	_, err := secureboot.Generate(filepath.Join(base, "keys"), "plant-7")
	require.NoError(t, err)
	writeFile(t, base, "base.yaml", minimalSpec+"secureBoot:\n  keys: keys\n")
	dir := t.TempDir()
	s, err := Parse(writeFile(t, dir, "site.yaml", "apiVersion: terrarium.dev/v1alpha1\nkind: BuildSpec\nextends: "+filepath.Join(base, "base.yaml")+"\nname: site\n"))
	require.NoError(t, err)
	require.True(t, s.SecureBootOn())
	ks, err := s.SecureBootKeys()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(base, "keys"), ks.Dir)
}
