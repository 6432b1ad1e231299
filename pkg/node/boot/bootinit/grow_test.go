package bootinit

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// imageWithState writes a GPT disk image of size MiB: an EFI partition, a
// slot and TERRA-STATE filling the rest, and (when stateLast is false) a
// small partition after TERRA-STATE.
func imageWithState(t *testing.T, sizeMiB int64, stateLast bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	d, err := diskfs.Create(path, sizeMiB*layout.MiB, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	defer d.Close()
	mib := uint64(layout.MiB / 512)
	end := uint64(sizeMiB)*mib - mib - 1
	parts := []*gpt.Partition{
		{Index: 1, Start: mib, End: 9*mib - 1, Type: gpt.EFISystemPartition, Name: layout.LabelESP},
		{Index: 2, Start: 9 * mib, End: 25*mib - 1, Type: gpt.Type(layout.TypeRootX86_64), Name: layout.LabelSlotA},
	}
	if stateLast {
		parts = append(parts, &gpt.Partition{Index: 3, Start: 25 * mib, End: end, Type: gpt.Type(layout.TypeVar), Name: layout.LabelState})
	} else {
		parts = append(parts,
			&gpt.Partition{Index: 3, Start: 25 * mib, End: 41*mib - 1, Type: gpt.Type(layout.TypeVar), Name: layout.LabelState},
			&gpt.Partition{Index: 4, Start: 41 * mib, End: end, Type: gpt.LinuxFilesystem, Name: "data"})
	}
	for _, p := range parts {
		p.Size = (p.End - p.Start + 1) * 512
	}
	require.NoError(t, d.Partition(&gpt.Table{Partitions: parts, LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true}))
	return path
}

func readTable(t *testing.T, path string) (*gpt.Table, int64) {
	t.Helper()
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	require.NoError(t, err)
	defer d.Close()
	pt, err := d.GetPartitionTable()
	require.NoError(t, err)
	return pt.(*gpt.Table), d.Size
}

// A disk enlarged after its image was written: TERRA-STATE grows to the
// new end, nothing else changes, and sgdisk finds the table sound.
func TestGrownStateOnEnlargedDisk(t *testing.T) {
	path := imageWithState(t, 64, true)
	before, _ := readTable(t, path)
	require.NoError(t, os.Truncate(path, 256*layout.MiB))

	// As the initramfs does it, through openGPT (the image file stands in
	// for /dev/<disk>).
	d, table, err := openGPT(&diskInfo{name: devRelative(t, path)})
	require.NoError(t, err)
	grown, from, to, ok := grownState(table, d.Size)
	require.True(t, ok)
	assert.Equal(t, uint64((64-25-1)*layout.MiB), from)
	assert.Equal(t, uint64((256-25-1)*layout.MiB), to)
	require.NoError(t, d.Partition(grown))
	require.NoError(t, d.Close())

	out, err := exec.Command("sgdisk", "-v", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "No problems found")
	after, _ := readTable(t, path)
	require.Len(t, after.Partitions, 3)
	assert.Equal(t, before.GUID, after.GUID, "disk GUID")
	for i, p := range after.Partitions {
		b := before.Partitions[i]
		assert.Equal(t, b.GUID, p.GUID, "partition %d GUID", i+1)
		assert.Equal(t, b.Name, p.Name)
		assert.Equal(t, b.Start, p.Start, "partition %d start", i+1)
		if p.Name != layout.LabelState {
			assert.Equal(t, b.End, p.End, "partition %d end", i+1)
		}
	}
	assert.Equal(t, to, after.Partitions[2].Size)

	// Grown once, the same disk offers nothing more.
	table, size := readTable(t, path)
	_, _, _, ok = grownState(table, size)
	assert.False(t, ok, "a grown STATE grows again")
}

func TestGrownStateLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateLast bool
		newMiB    int64
	}{
		{"the disk did not grow", true, 64},
		{"grown by less than the minimum", true, 64 + stateGrowMin/layout.MiB - 1},
		{"a partition after TERRA-STATE", false, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := imageWithState(t, 64, tc.stateLast)
			require.NoError(t, os.Truncate(path, tc.newMiB*layout.MiB))
			table, size := readTable(t, path)
			_, _, _, ok := grownState(table, size)
			assert.False(t, ok)
		})
	}
}

// ext4Size reads what mkfs.ext4 made, with and without the 64bit feature.
func TestExt4Size(t *testing.T) {
	for _, features := range []string{"^64bit", "64bit"} {
		t.Run(features, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fs.img")
			require.NoError(t, os.WriteFile(path, nil, 0o644))
			require.NoError(t, os.Truncate(path, 96*layout.MiB))
			out, err := exec.Command("mkfs.ext4", "-q", "-F", "-O", features, "-b", "4096", path).CombinedOutput()
			require.NoError(t, err, "%s", out)
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			bs, blocks, err := ext4Size(f)
			require.NoError(t, err)
			assert.Equal(t, uint64(4096), bs)
			assert.Equal(t, uint64(96*layout.MiB/4096), blocks)
		})
	}
	path := filepath.Join(t.TempDir(), "zeros.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 4096), 0o644))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, _, err = ext4Size(f)
	assert.ErrorContains(t, err, "no ext4 superblock")
}

// A disk without a GPT is refused by name, before anything is written.
func TestOpenGPTWithoutOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blank.img")
	require.NoError(t, os.WriteFile(path, make([]byte, 4*layout.MiB), 0o644))
	_, _, err := openGPT(&diskInfo{name: devRelative(t, path)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "blank.img")
	blank, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 4*layout.MiB), blank, "the disk is untouched")
}

// FuzzExt4Size reads superblocks of a disk the node did not write: what
// it accepts has a block size ext4 can have.
func FuzzExt4Size(f *testing.F) {
	sb := make([]byte, 2048)
	binary.LittleEndian.PutUint16(sb[1024+0x38:], 0xEF53)
	binary.LittleEndian.PutUint32(sb[1024+0x18:], 2)
	binary.LittleEndian.PutUint32(sb[1024+0x4:], 24576)
	f.Add(sb)
	sb64 := slices.Clone(sb)
	binary.LittleEndian.PutUint32(sb64[1024+0x60:], 0x80)
	binary.LittleEndian.PutUint32(sb64[1024+0x150:], 1)
	f.Add(sb64)
	f.Add(make([]byte, 1500))
	f.Fuzz(func(t *testing.T, b []byte) {
		bs, _, err := ext4Size(bytes.NewReader(b))
		if err != nil {
			return
		}
		if bs < 1024 || bs > 64<<10 || bs&(bs-1) != 0 {
			t.Fatalf("block size %d accepted", bs)
		}
	})
}
