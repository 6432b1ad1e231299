package media

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzProbe hands any first bytes of a medium (the seed corpus in
// testdata/fuzz/FuzzProbe holds boot sectors and superblocks of mkfs.vfat,
// go-diskfs and mkfs.ext4; the crafted cases of every kind are added) to
// Probe: it never fails on bytes it could read, names one of its
// filesystems, looks at nothing past probeSize, and says FAT or exFAT
// only of a sector 0 whose boot signature and sizes hold: what the kernel
// is then asked to mount as such.
func FuzzProbe(f *testing.F) {
	for _, tc := range probeCases() {
		f.Add(tc.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Probe(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("Probe of bytes it could read: %v", err)
		}
		switch got {
		case Unknown, VFAT, ExFAT, ISO9660, Ext2, Ext3, Ext4, Btrfs, XFS, NTFS, F2FS, Squashfs, LUKS:
		default:
			t.Fatalf("Probe found %q, none of its filesystems", got)
		}
		// Only the first probeSize bytes count.
		longer := append(append([]byte{}, data...), bytes.Repeat([]byte{0xff}, 4096)...)
		if len(data) >= probeSize {
			if again, _ := Probe(bytes.NewReader(longer)); again != got {
				t.Fatalf("Probe found %s, and %s with bytes past probeSize", got, again)
			}
		}
		if got != VFAT && got != ExFAT {
			return
		}
		if len(data) < 512 || data[510] != 0x55 || data[511] != 0xaa {
			t.Fatalf("%s without a boot sector's signature", got)
		}
		if got == ExFAT {
			if shift := data[108]; shift < 9 || shift > 12 {
				t.Fatalf("exFAT of 2^%d-byte sectors", shift)
			}
			return
		}
		bps := binary.LittleEndian.Uint16(data[11:])
		if bps < 512 || bps > 4096 || bps&(bps-1) != 0 || data[13] == 0 || data[16] == 0 {
			t.Fatalf("FAT of %d-byte sectors, %d sectors a cluster, %d FATs", bps, data[13], data[16])
		}
	})
}

// FuzzParseRequest hands any bytes to the stick service's request parser
// (what arrives on its socket; seeds in testdata/fuzz/FuzzParseRequest):
// it accepts only a clean path under /dev, a label and an access that is
// Read or Write, and what it accepts encodes and parses back to itself.
func FuzzParseRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseRequest(data)
		if err != nil {
			return
		}
		if !strings.HasPrefix(req.Device, "/dev/") || filepath.Clean(req.Device) != req.Device || req.Label == "" {
			t.Fatalf("accepted %+v from %q", req, data)
		}
		if req.Access != Read && req.Access != Write {
			t.Fatalf("accepted the access %v from %q", req.Access, data)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("encode %+v: %v", req, err)
		}
		back, err := parseRequest(again)
		if err != nil || back != req {
			t.Fatalf("%+v encodes to %s, which parses to %+v, %v", req, again, back, err)
		}
	})
}
