package efiboot

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// espType is the EFI system partition type GUID, whose on-disk bytes
// every GPT tool prints: 28 73 2a c1 1f f8 d2 11 ba 4b 00 a0 c9 3e c9 3b.
const espType = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"

func TestGUIDBytes(t *testing.T) {
	b, err := guidBytes(espType)
	require.NoError(t, err)
	assert.Equal(t, "28732ac11ff8d211ba4b00a0c93ec93b", hex.EncodeToString(b[:]))
	assert.Equal(t, espType, guidString(b))
	for _, bad := range []string{"", "c12a7328f81f11d2ba4b00a0c93ec93b", "c12a7328-f81f-11d2-ba4b-00a0c93ec93g", "c12a7328-f81f-11d2-ba4b_00a0c93ec93b"} {
		_, err := guidBytes(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func option() LoadOption {
	return LoadOption{
		Description: "Terrarium",
		Partition:   Partition{Number: 1, Start: 2048, Size: 524288, GUID: "0b7c4a5e-3f2d-4c1b-9a8e-7d6c5b4a3f2e"},
		Path:        LoaderPath,
	}
}

// TestMarshal pins the encoding of a load option, field by field, as the
// UEFI specification lays it out.
func TestMarshal(t *testing.T) {
	b, err := option().Marshal()
	require.NoError(t, err)
	assert.Equal(t, uint32(1), binary.LittleEndian.Uint32(b[0:4]), "LOAD_OPTION_ACTIVE")
	desc := ucs2("Terrarium")
	assert.Equal(t, desc, b[6:6+len(desc)])
	dp := b[6+len(desc):]
	assert.Equal(t, int(binary.LittleEndian.Uint16(b[4:6])), len(dp), "FilePathListLength")
	hd := dp[:42]
	assert.Equal(t, []byte{4, 1, 42, 0}, hd[:4], "Hard Drive Media node")
	assert.Equal(t, uint32(1), binary.LittleEndian.Uint32(hd[4:8]))
	assert.Equal(t, uint64(2048), binary.LittleEndian.Uint64(hd[8:16]))
	assert.Equal(t, uint64(524288), binary.LittleEndian.Uint64(hd[16:24]))
	assert.Equal(t, "5e4a7c0b2d3f1b4c9a8e7d6c5b4a3f2e", hex.EncodeToString(hd[24:40]))
	assert.Equal(t, []byte{2, 2}, hd[40:42], "GPT, GUID signature")
	fp := dp[42:]
	path := ucs2(LoaderPath)
	assert.Equal(t, []byte{4, 4}, fp[:2], "File Path node")
	assert.Equal(t, uint16(4+len(path)), binary.LittleEndian.Uint16(fp[2:4]))
	assert.Equal(t, path, fp[4:4+len(path)])
	assert.Equal(t, []byte{0x7f, 0xff, 4, 0}, fp[4+len(path):], "end node")

	d, g, err := ParseDescription(b)
	require.NoError(t, err)
	assert.Equal(t, "Terrarium", d)
	assert.Equal(t, option().Partition.GUID, g)

	bad := option()
	bad.Partition.GUID = "nope"
	_, err = bad.Marshal()
	assert.Error(t, err)
}

// FuzzParseDescription: load options come from the firmware's NVRAM,
// written by any OS; parsing never panics.
func FuzzParseDescription(f *testing.F) {
	b, _ := option().Marshal()
	f.Add(b)
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 'a', 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = ParseDescription(b) // any input: an error or a description, never a panic
	})
}

func putVar(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+"-"+GlobalGUID), append([]byte{7, 0, 0, 0}, data...), 0o644))
}

func TestVarsEnsureFirstNext(t *testing.T) {
	dir := t.TempDir()
	v := Vars{Dir: dir}
	other := option()
	other.Description = "UEFI QEMU DVD-ROM"
	other.Partition.GUID = "11111111-2222-3333-4444-555555555555"
	ob, err := other.Marshal()
	require.NoError(t, err)
	putVar(t, dir, "Boot0000", ob)
	putVar(t, dir, "Boot0001", []byte{1, 0, 0, 0, 4, 0, 'x', 0, 0, 0, 0x7f, 0xff, 4, 0})
	putVar(t, dir, "BootOrder", []byte{0, 0, 1, 0})
	putVar(t, dir, "Timeout", []byte{0, 0}) // not a boot option

	n, err := v.Ensure(option())
	require.NoError(t, err)
	assert.Equal(t, uint16(2), n, "the first free number")
	require.NoError(t, v.First(n))
	order, err := v.BootOrder()
	require.NoError(t, err)
	assert.Equal(t, []uint16{2, 0, 1}, order)

	// Ensuring again reuses the option that names the partition.
	again, err := v.Ensure(option())
	require.NoError(t, err)
	assert.Equal(t, n, again)
	require.NoError(t, v.First(again))
	order, err = v.BootOrder()
	require.NoError(t, err)
	assert.Equal(t, []uint16{2, 0, 1}, order, "not listed twice")

	require.NoError(t, v.Next(n))
	raw, err := os.ReadFile(filepath.Join(dir, "BootNext-"+GlobalGUID))
	require.NoError(t, err)
	assert.Equal(t, []byte{7, 0, 0, 0, 2, 0}, raw, "attributes NV|BS|RT, then the number")

	found, ok, err := v.Find(option().Partition.GUID)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, n, found)
}

func TestBootOrderAbsent(t *testing.T) {
	order, err := Vars{Dir: t.TempDir()}.BootOrder()
	require.NoError(t, err)
	assert.Nil(t, order)
	_, err = Vars{Dir: filepath.Join(t.TempDir(), "missing")}.Ensure(option())
	assert.Error(t, err)
}

func TestOwnVariable(t *testing.T) {
	o := Own{Dir: t.TempDir(), Name: HandoverVar}
	_, ok, err := o.Get()
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, o.Set([]byte("vda")))
	got, ok, err := o.Get()
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "vda", string(got))
	assert.FileExists(t, filepath.Join(o.Dir, HandoverVar+"-"+TerrariumGUID))
	require.NoError(t, o.Delete())
	_, ok, err = o.Get()
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, o.Delete(), "deleting an absent variable")
}

func TestBooted(t *testing.T) {
	root := t.TempDir()
	assert.False(t, Booted(root), "no /sys/firmware/efi: BIOS")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sys/firmware"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "sys/firmware/efi"), nil, 0o644))
	assert.False(t, Booted(root), "a file is not the firmware's directory")
	require.NoError(t, os.Remove(filepath.Join(root, "sys/firmware/efi")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sys/firmware/efi/efivars"), 0o755))
	assert.True(t, Booted(root))
}
