package localvolumes

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseExt4Superblock(t *testing.T) {
	sb := make([]byte, 1024)
	assert.Equal(t, ext4ID{}, parseExt4Superblock(sb), "zeros are no filesystem")
	binary.LittleEndian.PutUint16(sb[0x38:], 0xef53)
	copy(sb[0x68:], []byte{0x0b, 0x9a, 0x4c, 0xb1, 0x6e, 0x9c, 0x4a, 0x39, 0x9f, 0x4e, 0x3a, 0x3f, 0x1c, 0x3f, 0x2b, 0x10})
	copy(sb[0x78:], "TERRA-VOLUMES")
	assert.Equal(t, ext4ID{ext4: true, uuid: "0b9a4cb1-6e9c-4a39-9f4e-3a3f1c3f2b10", label: "TERRA-VOLUMES"}, parseExt4Superblock(sb))
	copy(sb[0x78:], "0123456789abcdefXYZ") // a full 16-byte name has no NUL
	assert.Equal(t, "0123456789abcdef", parseExt4Superblock(sb).label)
	assert.Equal(t, ext4ID{}, parseExt4Superblock(sb[:100]), "short")
}

// FuzzParseExt4Superblock reads whatever a disk holds where an ext4
// superblock would be: it never panics, and a filesystem it finds has a
// UUID in by-uuid's form and a label of at most 16 bytes.
func FuzzParseExt4Superblock(f *testing.F) {
	sb := make([]byte, 1024)
	binary.LittleEndian.PutUint16(sb[0x38:], 0xef53)
	copy(sb[0x78:], "TERRA-VOLUMES")
	f.Add(sb)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id := parseExt4Superblock(b)
		if !id.ext4 {
			return
		}
		if len(id.uuid) != 36 || len(id.label) > 16*3 {
			t.Fatalf("uuid %q label %q", id.uuid, id.label)
		}
	})
}
