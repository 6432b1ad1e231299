package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// volumeArea is a mounted volume area: a directory with the marker.
func volumeArea(t *testing.T) string {
	t.Helper()
	area := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(area, areaMarker), nil, 0o600))
	return area
}

func TestCreateAndDelete(t *testing.T) {
	area := volumeArea(t)
	vol := filepath.Join(area, "pvc-1234_default_data")
	var out bytes.Buffer
	require.NoError(t, run([]string{"-p", vol, "-s", "1073741824", "-m", "Filesystem", "-a", "create"}, &out))
	st, err := os.Stat(vol)
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	assert.Equal(t, os.FileMode(0o777), st.Mode().Perm(), "any pod user may write its volume")
	assert.Contains(t, out.String(), "created "+vol)

	// A second create (the helper pod run again) keeps what is there.
	require.NoError(t, os.WriteFile(filepath.Join(vol, "data"), []byte("x"), 0o600))
	require.NoError(t, run([]string{"-p", vol, "-s", "1", "-m", "Filesystem", "-a", "create"}, &out))
	assert.FileExists(t, filepath.Join(vol, "data"))

	require.NoError(t, os.MkdirAll(filepath.Join(vol, "a", "b"), 0o755))
	require.NoError(t, run([]string{"-p", vol, "-s", "1", "-m", "Filesystem", "-a", "delete"}, &out))
	assert.NoDirExists(t, vol)
	// Deleting again is not an error: the volume is gone.
	require.NoError(t, run([]string{"-p", vol, "-s", "1", "-m", "Filesystem", "-a", "delete"}, &out))
}

func TestDeleteNeverFollowsALink(t *testing.T) {
	area, elsewhere := volumeArea(t), t.TempDir()
	keep := filepath.Join(elsewhere, "keep")
	require.NoError(t, os.WriteFile(keep, []byte("x"), 0o600))
	vol := filepath.Join(area, "pvc-link")
	require.NoError(t, os.Symlink(elsewhere, vol))

	require.NoError(t, run([]string{"-p", vol, "-a", "delete"}, &bytes.Buffer{}))
	assert.NoFileExists(t, vol)
	assert.FileExists(t, keep, "the link's target is untouched")
}

func TestCreateRefusesAFile(t *testing.T) {
	vol := filepath.Join(volumeArea(t), "pvc-file")
	require.NoError(t, os.WriteFile(vol, nil, 0o600))
	err := run([]string{"-p", vol, "-a", "create"}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a directory")
}

func TestRefused(t *testing.T) {
	area := volumeArea(t)
	unmounted := t.TempDir()
	vol := filepath.Join(area, "pvc-1")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no path", []string{"-a", "create"}, "-p: the volume's directory is required"},
		{"relative", []string{"-p", "pvc-1", "-a", "create"}, "not a clean absolute path"},
		{"unclean", []string{"-p", area + "/x/../pvc-1", "-a", "create"}, "not a clean absolute path"},
		{"not a volume", []string{"-p", area, "-a", "delete"}, "must start with pvc-"},
		{"root", []string{"-p", "/", "-a", "delete"}, "must start with pvc-"},
		{"no area", []string{"-p", filepath.Join(area, "missing", "pvc-1"), "-a", "create"}, "the volume area"},
		{"area not mounted", []string{"-p", filepath.Join(unmounted, "pvc-1"), "-a", "create"}, "volume area is not mounted"},
		{"delete on an area not mounted", []string{"-p", filepath.Join(unmounted, "pvc-1"), "-a", "delete"}, "volume area is not mounted"},
		{"block", []string{"-p", vol, "-m", "Block", "-a", "create"}, "only Filesystem"},
		{"size", []string{"-p", vol, "-s", "-5", "-a", "create"}, "not a size in bytes"},
		{"action", []string{"-p", vol, "-a", "resize"}, "want create or delete"},
		{"flag", []string{"-x"}, "usage"},
		{"extra", []string{"-p", vol, "-a", "create", "more"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, &bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.NoDirExists(t, vol, "nothing was created")
}
