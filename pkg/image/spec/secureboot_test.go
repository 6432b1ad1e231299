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
	_, err := secureboot.Generate(filepath.Join(dir, "keys"), "plant-7")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "empty"), 0o700))

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
		{
			name: "with an iso", add: "secureBoot:\n  keys: keys\noutputs: [qcow2, iso]\n",
			problems: []string{"outputs", "lists iso", "without secureBoot"},
		},
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
