package localvolumes_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/localvolumes"
)

// superblock writes an ext4 superblock of uuid and label into dev.
func superblock(t *testing.T, dev, id, label string) {
	t.Helper()
	sb := make([]byte, 1024)
	binary.LittleEndian.PutUint16(sb[0x38:], 0xef53)
	u, err := uuid.Parse(id)
	require.NoError(t, err)
	copy(sb[0x68:], u[:])
	copy(sb[0x78:0x88], label)
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(sb, 1024)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// diskNode is a fake node with its own disk vda (Terrarium's) and a data
// disk vdb of 2 MiB of zeros, which the fake mkfs.ext4 formats.
func diskNode(t *testing.T) (*fakeNode, *localvolumes.Area) {
	n := newNode(t)
	require.NoError(t, os.MkdirAll(n.h.Path("/dev"), 0o755))
	require.NoError(t, os.MkdirAll(n.h.Path(filepath.Dir(layout.LocalVolumesImage)), 0o755))
	for _, d := range []string{"vda", "vdb"} {
		require.NoError(t, os.WriteFile(n.h.Path("/dev/"+d), make([]byte, 2<<20), 0o600))
	}
	inner := n.h.Executor
	n.h.Executor = host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		out, err := inner.Exec(ctx, name, args...)
		if err == nil && name == "mkfs.ext4" && strings.HasPrefix(args[len(args)-1], "/dev/") {
			id, label := "", ""
			for i, a := range args {
				switch a {
				case "-U":
					id = args[i+1]
				case "-L":
					label = args[i+1]
				}
			}
			superblock(t, n.h.Path(args[len(args)-1]), id, label)
		}
		return out, err
	})
	a := n.area(8*gib, 6*gib)
	a.Disks = func() ([]installer.Disk, map[string]bool, error) {
		return []installer.Disk{
			{Name: "vda", Size: 20 * gib, Serial: "OS", Links: []string{"/dev/disk/by-path/pci-0000:00:04.0"}},
			{Name: "vdb", Size: 100 * gib, Serial: "DATA1", Links: []string{"/dev/disk/by-path/pci-0000:00:05.0"}},
		}, map[string]bool{"vda": true}, nil
	}
	return n, a
}

func ran(n *fakeNode, prefix string) []string {
	var out []string
	for _, c := range n.ran {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func TestEnsureDiskFormatsAnEmptyDisk(t *testing.T) {
	ctx := context.Background()
	n, a := diskNode(t)
	spec := localvolumes.Spec{Keep: keep, Disk: &machineconfig.DiskSelector{Serial: "DATA1"}}
	res, err := a.Ensure(ctx, spec)
	require.NoError(t, err)
	assert.True(t, res.Made)
	assert.Equal(t, "/dev/vdb (100.0 GiB, serial DATA1)", res.Disk)
	assert.Equal(t, 100*gib, res.Size)
	mkfs := ran(n, "mkfs.ext4")
	require.Len(t, mkfs, 1)
	assert.Contains(t, mkfs[0], "-L TERRA-VOLUMES")
	assert.True(t, strings.HasSuffix(mkfs[0], " /dev/vdb"), "the whole disk: %s", mkfs[0])

	dropIn, err := os.ReadFile(n.h.Path(layout.LocalVolumesDiskDropIn))
	require.NoError(t, err)
	id := mkfs[0][strings.Index(mkfs[0], "-U ")+3:][:36]
	assert.Contains(t, string(dropIn), "What=/dev/disk/by-uuid/"+id+"\n")
	assert.Contains(t, string(dropIn), "Options=nodev,nosuid\n")
	assert.Contains(t, string(dropIn), "ConditionPathExists=\n", "the file's condition is reset")
	assert.Equal(t, []string{"systemctl daemon-reload", "systemctl start " + layout.LocalVolumesUnit}, ran(n, "systemctl"))
	assert.FileExists(t, filepath.Join(n.h.Path(layout.LocalVolumesDir), layout.LocalVolumesMarker))
	assert.NoFileExists(t, n.h.Path(layout.LocalVolumesImage), "no file on TERRA-STATE")
	require.NoError(t, a.Check())

	// A later boot finds it mounted: nothing is made again.
	res, err = a.Ensure(ctx, spec)
	require.NoError(t, err)
	assert.False(t, res.Made)
	assert.Len(t, ran(n, "mkfs.ext4"), 1)

	// Not mounted (the disk missing at boot): the check says so.
	n.mounted = false
	assert.ErrorContains(t, a.Check(), "the volume area disk ("+layout.LocalVolumesDiskDropIn+") is not mounted")
}

// Cut after mkfs, before the drop-in: the next run finds the filesystem
// and goes on with it, formatting nothing.
func TestEnsureDiskAfterAPowerCut(t *testing.T) {
	n, a := diskNode(t)
	const id = "0b9a4cb1-6e9c-4a39-9f4e-3a3f1c3f2b10"
	superblock(t, n.h.Path("/dev/vdb"), id, layout.LabelVolumesFS)
	res, err := a.Ensure(context.Background(), localvolumes.Spec{Keep: keep, Disk: &machineconfig.DiskSelector{Path: "/dev/disk/by-path/pci-0000:00:05.0"}})
	require.NoError(t, err)
	assert.False(t, res.Made, "taken as it is, volumes and all")
	assert.Empty(t, ran(n, "mkfs.ext4"))
	dropIn, err := os.ReadFile(n.h.Path(layout.LocalVolumesDiskDropIn))
	require.NoError(t, err)
	assert.Contains(t, string(dropIn), "What=/dev/disk/by-uuid/"+id+"\n")
}

func TestEnsureDiskRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		prep  func(t *testing.T, n *fakeNode)
		sel   machineconfig.DiskSelector
		wants []string
	}{
		{"a partition table", func(t *testing.T, n *fakeNode) {
			f, err := os.OpenFile(n.h.Path("/dev/vdb"), os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("EFI PART"), 512)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}, machineconfig.DiskSelector{Serial: "DATA1"}, []string{"cluster.localStorage.disk selects /dev/vdb (100.0 GiB, serial DATA1), which holds a GPT partition table", "wipefs -a /dev/vdb"}},
		{"another filesystem", func(t *testing.T, n *fakeNode) {
			superblock(t, n.h.Path("/dev/vdb"), "0b9a4cb1-6e9c-4a39-9f4e-3a3f1c3f2b10", "plant-data")
		}, machineconfig.DiskSelector{Serial: "DATA1"}, []string{`which holds an ext4 filesystem labelled "plant-data"`}},
		{"Terrarium's own disk", func(*testing.T, *fakeNode) {}, machineconfig.DiskSelector{Serial: "OS"},
			[]string{"cluster.localStorage.disk selects serial OS, and none fits", "/dev/vda (20.0 GiB, serial OS): holds Terrarium"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, a := diskNode(t)
			tt.prep(t, n)
			_, err := a.Ensure(context.Background(), localvolumes.Spec{Keep: keep, Disk: &tt.sel})
			require.Error(t, err)
			for _, w := range tt.wants {
				assert.Contains(t, err.Error(), w)
			}
			assert.Empty(t, ran(n, "mkfs.ext4"), "nothing formatted")
			assert.NoFileExists(t, n.h.Path(layout.LocalVolumesDiskDropIn))
		})
	}
}

// A node whose area is a file keeps it when its config later selects a
// disk: an area is never moved.
func TestEnsureKeepsAFileArea(t *testing.T) {
	n, a := diskNode(t)
	_, err := a.Ensure(context.Background(), localvolumes.Spec{Keep: keep})
	require.NoError(t, err)
	n.mounted = false
	_, err = a.Ensure(context.Background(), localvolumes.Spec{Keep: keep, Disk: &machineconfig.DiskSelector{Serial: "DATA1"}})
	require.NoError(t, err)
	assert.Len(t, ran(n, "mkfs.ext4"), 1, "the file's, not the disk's")
	assert.NoFileExists(t, n.h.Path(layout.LocalVolumesDiskDropIn))
	assert.Contains(t, strings.Join(n.said, "\n"), "cluster.localStorage.disk applies only to a new area")
}

// cryptNode is diskNode on a node whose TERRA-STATE is encrypted, its data
// disk 32 MiB (room for a LUKS2 header): luksFormat is the real
// cryptsetup's on the disk's file; open, which needs the device mapper,
// makes the mapped device a file of the bytes a cipher makes of zeros.
func cryptNode(t *testing.T) (*fakeNode, *localvolumes.Area) {
	t.Helper()
	_, err := exec.LookPath("cryptsetup")
	require.NoError(t, err, "cryptsetup not found: run make deps")
	n, a := diskNode(t)
	require.NoError(t, os.Truncate(n.h.Path("/dev/vdb"), 32<<20))
	require.NoError(t, os.MkdirAll(n.h.Path(filepath.Dir(layout.RunStateEncryption)), 0o755))
	require.NoError(t, os.WriteFile(n.h.Path(layout.RunStateEncryption), []byte("tpm\n"), 0o644))
	inner := n.h.Executor
	n.h.Executor = host.ExecFunc(func(ctx context.Context, name string, args ...string) ([]byte, error) {
		out, err := inner.Exec(ctx, name, args...)
		if err != nil || name != "cryptsetup" {
			return out, err
		}
		switch args[0] {
		case "luksFormat":
			cmd := append([]string{}, args...)
			cmd[len(cmd)-1] = n.h.Path(cmd[len(cmd)-1])
			return exec.CommandContext(ctx, "cryptsetup", cmd...).CombinedOutput()
		case "open":
			garbage := make([]byte, 2<<20)
			_, _ = rand.Read(garbage)
			mapped := n.h.Path(layout.LocalVolumesMapperDev)
			if err := os.MkdirAll(filepath.Dir(mapped), 0o755); err != nil {
				return nil, err
			}
			return nil, os.WriteFile(mapped, garbage, 0o600)
		}
		return out, err
	})
	return n, a
}

// On a node whose TERRA-STATE is encrypted, an empty disk becomes a LUKS2
// volume whose key is on TERRA-STATE, the area's filesystem inside it,
// opened at boot by the unit firstboot writes before the mount.
func TestEnsureDiskEncrypted(t *testing.T) {
	ctx := context.Background()
	n, a := cryptNode(t)
	spec := localvolumes.Spec{Keep: keep, Disk: &machineconfig.DiskSelector{Serial: "DATA1"}}
	// A power cut before the filesystem inside was made.
	n.fail["mkfs.ext4"] = errors.New("power cut")
	_, err := a.Ensure(ctx, spec)
	require.ErrorContains(t, err, "power cut")
	delete(n.fail, "mkfs.ext4")
	require.NoError(t, os.Remove(n.h.Path(layout.LocalVolumesMapperDev)), "the mapping goes with the power")

	res, err := a.Ensure(ctx, spec)
	require.NoError(t, err)
	assert.True(t, res.Made)
	assert.True(t, res.Encrypted)
	assert.Len(t, ran(n, "cryptsetup luksFormat"), 1, "the volume is made once")
	assert.Contains(t, ran(n, "cryptsetup luksFormat")[0], "--label "+layout.LabelVolumesLUKS)
	assert.Len(t, ran(n, "cryptsetup open"), 2)
	mkfs := ran(n, "mkfs.ext4")
	require.Len(t, mkfs, 2)
	assert.True(t, strings.HasSuffix(mkfs[1], " "+layout.LocalVolumesMapperDev), "inside the volume: %s", mkfs[1])

	key, err := os.Stat(n.h.Path(layout.LocalVolumesKey))
	require.NoError(t, err)
	assert.Equal(t, int64(32), key.Size())
	assert.Equal(t, os.FileMode(0o600), key.Mode().Perm())
	f, err := os.Open(n.h.Path("/dev/vdb"))
	require.NoError(t, err)
	h, err := statecrypt.ReadHeader(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	assert.Equal(t, layout.LabelVolumesLUKS, h.Label)

	unit, err := os.ReadFile(n.h.Path("/etc/systemd/system/" + layout.LocalVolumesOpenUnit))
	require.NoError(t, err)
	assert.Contains(t, string(unit), "--key-file "+layout.LocalVolumesKey+" /dev/disk/by-uuid/"+h.UUID+" "+layout.LocalVolumesMapperName)
	assert.Contains(t, string(unit), "BindsTo=dev-disk-by\\x2duuid-"+strings.ReplaceAll(h.UUID, "-", "\\x2d")+".device")
	dropIn, err := os.ReadFile(n.h.Path(layout.LocalVolumesDiskDropIn))
	require.NoError(t, err)
	assert.Contains(t, string(dropIn), "What="+layout.LocalVolumesMapperDev+"\n")
	assert.Contains(t, string(dropIn), "Requires="+layout.LocalVolumesOpenUnit+"\n")
	require.NoError(t, a.Check())

	// Its key lost (TERRA-STATE made again): the disk is not formatted
	// over; the error says how to start again.
	n.mounted = false
	require.NoError(t, os.Remove(n.h.Path(layout.LocalVolumesMapperDev)))
	require.NoError(t, os.WriteFile(n.h.Path(layout.LocalVolumesKey), []byte("short"), 0o600))
	_, err = a.Ensure(ctx, spec)
	require.ErrorContains(t, err, "wipefs -a /dev/vdb")
	assert.Len(t, ran(n, "cryptsetup luksFormat"), 1)
}
