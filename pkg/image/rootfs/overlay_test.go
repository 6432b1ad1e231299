package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// repoOverlay is the default image's overlay.
const repoOverlay = "../../../os/overlay"

func TestReadModes(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []fileMode
		err        string
	}{
		{"none", "", nil, ""},
		{"lines and comments", "# the kubelet's\n0600 usr/lib/a.service\n\n  0640   etc/b.conf  \n",
			[]fileMode{{"usr/lib/a.service", 0o600}, {"etc/b.conf", 0o640}}, ""},
		{"not octal", "0680 etc/x\n", nil, `:1: "0680" is not an octal permission`},
		{"set-uid", "4755 usr/bin/x\n", nil, `"4755" is not an octal permission`},
		{"one field", "0600\n", nil, `:1: "0600" is not MODE PATH`},
		{"three fields", "# c\n0600 a b\n", nil, `:2: "0600 a b" is not MODE PATH`},
		{"absolute", "0600 /etc/x\n", nil, `"/etc/x" is not a path in the overlay`},
		{"out of the overlay", "0600 etc/../../x\n", nil, `"etc/../../x" is not a path in the overlay`},
		{"the modes file", "0600 .modes\n", nil, `".modes" is not a path in the overlay`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, ModesFile), []byte(tc.file), 0o644))
			}
			got, err := readModes(dir)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// The default overlay's modes name its files: the kubelet's units, root's
// alone.
func TestRepoOverlayModes(t *testing.T) {
	modes, err := readModes(repoOverlay)
	require.NoError(t, err)
	got := map[string]os.FileMode{}
	for _, m := range modes {
		fi, err := os.Lstat(filepath.Join(repoOverlay, m.path))
		require.NoError(t, err, m.path)
		assert.True(t, fi.Mode().IsRegular(), m.path)
		got[m.path] = m.mode
	}
	assert.Equal(t, os.FileMode(0o600), got["usr/lib/systemd/system/kubelet.service"])
	assert.Equal(t, os.FileMode(0o600), got["usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"])
}

// TestBuildSlotModesFile: a file the overlay's ModesFile names gets its
// mode in the image, and the ModesFile itself is not in the image; one
// that names no file of the overlay fails the build.
func TestBuildSlotModesFile(t *testing.T) {
	requireSlotTools(t)
	in := slotInputs(t, fakeBase(t, "base-modesfile", slotTree()))
	writeFiles(t, in.Overlay, map[string]string{
		"usr/lib/systemd/system/kubelet.service": "[Service]\n",
		ModesFile:                                "0600 usr/lib/systemd/system/kubelet.service\n",
	})
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	image, _, err := BuildSlot(context.Background(), c, in, epoch, discard)
	require.NoError(t, err)
	root := unsquash(t, image)
	fi, err := os.Stat(inRoot(root, "usr/lib/systemd/system/kubelet.service"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.NoFileExists(t, inRoot(root, ModesFile))
	fi, err = os.Stat(inRoot(root, "etc/terrarium/overlay.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "a file it does not name keeps git's mode")

	writeFiles(t, in.Overlay, map[string]string{ModesFile: "0600 etc/hostname\n"})
	_, _, err = BuildSlot(context.Background(), c, in, epoch, discard)
	assert.ErrorContains(t, err, "etc/hostname is not a file of the overlay", "a base's file is not the overlay's to change")
}

// The overlay's system users: its sysusers.d files, and the IDs they fix.
func TestOverlayUsers(t *testing.T) {
	files, ids, err := overlayUsers(repoOverlay)
	require.NoError(t, err)
	assert.Contains(t, files, "/usr/lib/sysusers.d/terrarium.conf")
	assert.Equal(t, 232, ids["etcd"], "etcd's ID is fixed")

	dir := writeFiles(t, t.TempDir(), map[string]string{
		"usr/lib/sysusers.d/b.conf": "# users\nu svc 300:300 \"a service\" - -\ng grp 301\nu dyn - \"dynamic\"\n",
		"usr/lib/sysusers.d/a.conf": "u other 302\n",
	})
	files, ids, err = overlayUsers(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/lib/sysusers.d/a.conf", "/usr/lib/sysusers.d/b.conf"}, files)
	assert.Equal(t, map[string]int{"svc": 300, "other": 302}, ids)

	files, _, err = overlayUsers(t.TempDir())
	require.NoError(t, err)
	assert.Empty(t, files, "no sysusers.d: nothing to run")
}

func TestCheckUsers(t *testing.T) {
	root := writeFiles(t, t.TempDir(), map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\netcd:x:232:232:etcd:/var/lib/etcd:/usr/sbin/nologin\nsvc:x:998:998::/:/usr/sbin/nologin\n",
	})
	assert.NoError(t, checkUsers(root, map[string]int{"etcd": 232}))
	assert.ErrorContains(t, checkUsers(root, map[string]int{"svc": 300}), "user svc has ID 998, not the 300 its sysusers.d file declares")
	assert.ErrorContains(t, checkUsers(root, map[string]int{"nobody": 65534}), "has no user nobody")
}
