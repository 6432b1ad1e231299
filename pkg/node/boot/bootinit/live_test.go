package bootinit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// pvd returns an ISO 9660 primary volume descriptor's first 72 bytes.
func pvd(volumeID string) []byte {
	b := make([]byte, isoPVDLen)
	b[0] = 1
	copy(b[1:], "CD001")
	b[6] = 1
	copy(b[40:], volumeID+strings.Repeat(" ", 32))
	return b
}

func TestParseVolumeID(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
		err  bool
	}{
		{name: "terrarium", in: pvd(layout.ISOVolumeID), want: layout.ISOVolumeID},
		{name: "other iso", in: pvd("DEBIAN 13"), want: "DEBIAN 13"},
		{name: "nul padded", in: append(pvd("")[:40], append([]byte("X"), make([]byte, 31)...)...), want: "X"},
		{name: "zeros", in: make([]byte, isoPVDLen), err: true},
		{name: "short", in: pvd(layout.ISOVolumeID)[:40], err: true},
		{name: "boot record, not primary", in: func() []byte { b := pvd("A"); b[0] = 0; return b }(), err: true},
		{name: "wrong version", in: func() []byte { b := pvd("A"); b[6] = 2; return b }(), err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVolumeID(tt.in)
			if tt.err {
				assert.ErrorIs(t, err, errNotISO)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// FuzzParseVolumeID: the descriptor comes from any disk attached to the
// machine; parsing never panics and never returns more than 32 bytes.
func FuzzParseVolumeID(f *testing.F) {
	f.Add(pvd(layout.ISOVolumeID))
	f.Add(make([]byte, isoPVDLen))
	f.Add([]byte("\x01CD001"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := parseVolumeID(b)
		if err == nil && len(id) > 32 {
			t.Fatalf("volume ID %q longer than its field", id)
		}
	})
}

func TestVolumeIDOfFile(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "sr0")
	img := make([]byte, isoPVDOffset+2048)
	copy(img[isoPVDOffset:], pvd(layout.ISOVolumeID))
	require.NoError(t, os.WriteFile(dev, img, 0o644))
	id, err := volumeID(dev)
	require.NoError(t, err)
	assert.Equal(t, layout.ISOVolumeID, id)

	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, make([]byte, 512), 0o644))
	_, err = volumeID(short)
	assert.Error(t, err, "a device too small for a descriptor")
}

func TestBlockDevices(t *testing.T) {
	fs := newFakeSysfs(t)
	const usb = "pci0000:00/0000:00:06.0/usb1/1-1/host0/target0:0:0/0:0:0:0/block/sda"
	fs.add(usb, diskUevent("sda"))
	fs.add(usb+"/sda2", partUevent("sda2", 2, "Appended2"))
	require.NoError(t, os.WriteFile(filepath.Join(fs.root, "sys", "devices", usb, "sda2", "partition"), []byte("2\n"), 0o644))
	fs.add("pci0000:00/0000:00:04.0/virtio1/block/vda", diskUevent("vda"))
	fs.add("pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0", diskUevent("sr0"))
	for _, v := range []string{"loop0", "ram0", "zram0", "dm-0"} {
		fs.add("virtual/block/"+v, diskUevent(v))
	}

	devs, err := blockDevices(fs.classBlock())
	require.NoError(t, err)
	assert.Equal(t, []blockDevice{
		{name: "sda"}, {name: "sr0"}, {name: "vda"},
		{name: "sda2", partition: true, parent: "sda"},
	}, devs, "whole disks first, by name; no loop, RAM or device-mapper devices")
}

func TestEmptyDisk(t *testing.T) {
	dir := t.TempDir()
	big := layout.MinStateSize + layout.Alignment + layout.GPTReserve
	mk := func(name string, size int64, data []byte, at int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size))
		if data != nil {
			_, err = f.WriteAt(data, at)
			require.NoError(t, err)
		}
		require.NoError(t, f.Close())
		return p
	}
	sys := func(removable string) string {
		d := t.TempDir()
		if removable != "" {
			require.NoError(t, os.WriteFile(filepath.Join(d, "removable"), []byte(removable+"\n"), 0o644))
		}
		return d
	}
	tests := []struct {
		name string
		dev  string
		sys  string
		want bool
	}{
		{"zeros", mk("zeros", big, nil, 0), sys("0"), true},
		{"no removable file", mk("zeros2", big, nil, 0), sys(""), true},
		{"a protective MBR", mk("mbr", big, []byte{0x55, 0xaa}, 510), sys("0"), false},
		{"a filesystem deep in the first MiB", mk("fs", big, []byte{1}, layout.MiB-1), sys("0"), false},
		{"data after the first MiB only", mk("late", big, []byte{1}, layout.MiB), sys("0"), true},
		{"too small for STATE", mk("small", big-1, nil, 0), sys("0"), false},
		{"removable", mk("stick", big, nil, 0), sys("1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := emptyDisk(tt.dev, tt.sys)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	_, err := emptyDisk(filepath.Join(dir, "missing"), sys("0"))
	assert.Error(t, err)
}

func TestLiveStateModeRefusesUnknownValue(t *testing.T) {
	in := &Init{console: &strings.Builder{}, sysroot: t.TempDir(), cmdline: parseCmdline(layout.CmdlineLive + " " + layout.CmdlineState + "=usb")}
	require.True(t, in.live())
	err := in.ensureLiveState(t.Context(), "sr0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `terrarium.state="usb"`)
	assert.Contains(t, err.Error(), `"ram"`)
}
