package vmdk

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// The hosted sparse extent format of VMware's Virtual Disk Format 1.1
// specification, as its streamOptimized variant uses it. Offsets and sizes
// in the header, the markers, the grain directory (GD) and the grain
// tables (GT) count 512-byte sectors.
const (
	SectorSize = 512

	// GrainSectors is the grain size: each compressed block holds 128
	// sectors (64 KiB) of the disk.
	GrainSectors = 128
	grainBytes   = GrainSectors * SectorSize

	// gtesPerGT is the number of grain table entries per grain table: one
	// grain table covers 32 MiB of the disk.
	gtesPerGT = 512
	gtSectors = gtesPerGT * 4 / SectorSize
	gtBytes   = gtesPerGT * grainBytes

	// descriptorSectors is the room for the embedded descriptor (VMware's
	// own tools reserve the same), from sector 1.
	descriptorSectors = 20
	// overheadSectors is where the first grain starts: one grain after
	// the header, like the streamOptimized files VMware's tools and
	// qemu-img write; the sectors after the descriptor are zero.
	overheadSectors = GrainSectors

	magic   = 0x564d444b // "KDMV" little endian
	version = 3          // ESXi refuses version 1 stream files ("sparse VMDK version too old")

	flagNewlineTest = 1 << 0  // the newline detection characters are valid
	flagCompressed  = 1 << 16 // grains are compressed
	flagMarkers     = 1 << 17 // grains and metadata are preceded by markers
	// headerFlags has no redundant grain directory (bit 1): a
	// streamOptimized extent must not claim one, and its rgdOffset is 0.
	headerFlags = flagNewlineTest | flagCompressed | flagMarkers

	compressDeflate = 1

	// gdAtEnd in the header's gdOffset says the grain directory's offset
	// is in the footer.
	gdAtEnd = 0xffffffffffffffff

	markerEOS    = 0
	markerGT     = 1
	markerGD     = 2
	markerFooter = 3

	// grainMarkerSize is the size of a grain marker before its data: the
	// grain's first sector (uint64) and the compressed length (uint32).
	grainMarkerSize = 12
)

// header is the SparseExtentHeader, written as the first sector and, with
// the real gdOffset, as the footer.
type header struct {
	capacity  uint64 // sectors
	gdOffset  uint64 // sectors, or gdAtEnd
	overhead  uint64 // sectors before the first grain
	descSize  uint64 // sectors of descriptor room
	descStart uint64 // sector of the descriptor
}

// marshal returns the header as one sector.
func (h header) marshal() []byte {
	b := make([]byte, SectorSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], magic)
	le.PutUint32(b[4:], version)
	le.PutUint32(b[8:], headerFlags)
	le.PutUint64(b[12:], h.capacity)
	le.PutUint64(b[20:], GrainSectors)
	le.PutUint64(b[28:], h.descStart)
	le.PutUint64(b[36:], h.descSize)
	le.PutUint32(b[44:], gtesPerGT)
	le.PutUint64(b[48:], 0) // rgdOffset: none
	le.PutUint64(b[56:], h.gdOffset)
	le.PutUint64(b[64:], h.overhead)
	b[72] = 0 // uncleanShutdown
	b[73], b[74], b[75], b[76] = '\n', ' ', '\r', '\n'
	le.PutUint16(b[77:], compressDeflate)
	return b
}

// metadataMarker returns the marker sector that precedes a grain table, the
// grain directory or the footer (numSectors of them), or the end-of-stream
// marker: a zero sector.
func metadataMarker(typ uint32, numSectors uint64) []byte {
	b := make([]byte, SectorSize)
	binary.LittleEndian.PutUint64(b[0:], numSectors)
	// b[8:12] is the size field, zero for metadata markers.
	binary.LittleEndian.PutUint32(b[12:], typ)
	return b
}

// Adapter is the disk controller the descriptor names
// (ddb.adapterType), which also picks the geometry it records.
type Adapter string

// Adapters VMware's descriptors know.
const (
	AdapterIDE      Adapter = "ide"
	AdapterBusLogic Adapter = "buslogic"
	AdapterLSILogic Adapter = "lsilogic"
)

func (a Adapter) valid() bool {
	return a == AdapterIDE || a == AdapterBusLogic || a == AdapterLSILogic
}

// geometry returns the CHS geometry VMware records for a disk of capacity
// sectors on adapter a.
func (a Adapter) geometry(capacity uint64) (cylinders, heads, sectors uint64) {
	heads, sectors, maxCyl := uint64(255), uint64(63), uint64(65535)
	if a == AdapterIDE {
		heads, maxCyl = 16, 16383
	}
	cylinders = min((capacity+heads*sectors-1)/(heads*sectors), maxCyl)
	return cylinders, heads, sectors
}

// descriptor is the embedded text descriptor. Its fields follow what
// VMware's own converter writes, which vCenter accepts:
//   - createType "streamOptimized" and one SPARSE extent of the whole
//     capacity naming the file itself;
//   - a CID that is neither ffffffff ("no parent") nor fffffffe, with
//     parentCID ffffffff: this disk has no parent;
//   - ddb.virtualHWVersion "4", the obsolete field's most compatible
//     value: the OVF's VirtualSystemType, not the disk, sets the VM's
//     hardware version;
//   - ddb.toolsVersion 2147483647: the guest's tools (open-vm-tools) are
//     managed by the guest, not by vSphere.
type descriptor struct {
	cid       uint32
	longCID   [16]byte
	capacity  uint64
	extent    string
	adapter   Adapter
	cylinders uint64
	heads     uint64
	sectors   uint64
}

func (d descriptor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=%08x\nparentCID=ffffffff\ncreateType=\"streamOptimized\"\n\n", d.cid)
	fmt.Fprintf(&b, "# Extent description\nRW %d SPARSE \"%s\"\n\n", d.capacity, d.extent)
	fmt.Fprintf(&b, "# The Disk Data Base\n#DDB\n\n")
	fmt.Fprintf(&b, "ddb.adapterType = \"%s\"\n", d.adapter)
	fmt.Fprintf(&b, "ddb.geometry.cylinders = \"%d\"\nddb.geometry.heads = \"%d\"\nddb.geometry.sectors = \"%d\"\n", d.cylinders, d.heads, d.sectors)
	fmt.Fprintf(&b, "ddb.longContentID = \"%x\"\n", d.longCID)
	fmt.Fprintf(&b, "ddb.toolsVersion = \"2147483647\"\nddb.virtualHWVersion = \"4\"\n")
	return b.String()
}
