package vmdk

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// This file is a strict reader of the streamOptimized VMDKs Write makes,
// for the tests: it checks the layout vSphere expects, both as a sparse
// extent (header, footer, grain directory and tables pointing at grain
// markers) and as a stream read front to back up to the end-of-stream
// marker, and returns the disk's content.

var errBad = errors.New("bad VMDK")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBad, fmt.Sprintf(format, args...))
}

// rawHeader is the SparseExtentHeader as it is on disk (79 bytes, packed).
type rawHeader struct {
	Magic        uint32
	Version      uint32
	Flags        uint32
	Capacity     uint64
	GrainSize    uint64
	DescOffset   uint64
	DescSize     uint64
	NumGTEsPerGT uint32
	RGDOffset    uint64
	GDOffset     uint64
	Overhead     uint64
	Unclean      uint8
	Newlines     [4]byte
	Compress     uint16
}

func parseHeader(sector []byte) (rawHeader, error) {
	var h rawHeader
	if err := binary.Read(bytes.NewReader(sector), binary.LittleEndian, &h); err != nil {
		return h, bad("header: %v", err)
	}
	switch {
	case h.Magic != magic:
		return h, bad("magic %#x", h.Magic)
	case h.Version != version:
		return h, bad("version %d", h.Version)
	case h.Flags != headerFlags:
		return h, bad("flags %#x", h.Flags)
	case h.GrainSize != GrainSectors || h.NumGTEsPerGT != gtesPerGT:
		return h, bad("grain size %d, %d GTEs per GT", h.GrainSize, h.NumGTEsPerGT)
	case h.RGDOffset != 0:
		return h, bad("rgdOffset %d", h.RGDOffset)
	case h.Newlines != [4]byte{'\n', ' ', '\r', '\n'}:
		return h, bad("newline detector %q", h.Newlines)
	case h.Compress != compressDeflate:
		return h, bad("compression %d", h.Compress)
	case h.Unclean != 0:
		return h, bad("unclean shutdown")
	}
	return h, nil
}

// marker is one marker of the stream.
type marker struct {
	sector uint64
	val    uint64 // a grain's LBA, or a metadata marker's sector count
	size   uint32 // a grain's compressed size; 0 for metadata markers
	typ    uint32
}

// parsed is what readVMDK found.
type parsed struct {
	header     rawHeader
	footer     rawHeader
	descriptor string
	raw        []byte
	grains     int // grains stored
}

// readVMDK reads a whole VMDK; a capacity above maxRaw bytes is refused.
func readVMDK(data []byte, maxRaw uint64) (*parsed, error) {
	if len(data)%SectorSize != 0 || len(data) < 4*SectorSize {
		return nil, bad("size %d is not a multiple of 512 of at least 4 sectors", len(data))
	}
	n := uint64(len(data) / SectorSize)
	sector := func(i uint64) []byte { return data[i*SectorSize : (i+1)*SectorSize] }
	h, err := parseHeader(sector(0))
	if err != nil {
		return nil, err
	}
	if h.GDOffset != gdAtEnd {
		return nil, bad("header gdOffset %d, want GD_AT_END", h.GDOffset)
	}
	if h.Capacity == 0 || h.Capacity > maxRaw/SectorSize {
		return nil, bad("capacity %d sectors", h.Capacity)
	}
	p := &parsed{header: h}
	if p.footer, err = readFooter(data, n, h); err != nil {
		return nil, err
	}
	if h.DescOffset != 1 || h.DescSize == 0 || h.DescSize >= n || h.Overhead >= n || h.Overhead < 1+h.DescSize {
		return nil, bad("descriptor at %d (%d sectors), overhead %d, of %d sectors", h.DescOffset, h.DescSize, h.Overhead, n)
	}
	desc := data[SectorSize : (1+h.DescSize)*SectorSize]
	if i := bytes.IndexByte(desc, 0); i >= 0 {
		if !allZero(desc[i:]) {
			return nil, bad("bytes after the descriptor's end")
		}
		desc = desc[:i]
	}
	p.descriptor = string(desc)
	if !allZero(data[(1+h.DescSize)*SectorSize : h.Overhead*SectorSize]) {
		return nil, bad("bytes between the descriptor and the first grain")
	}
	markers, err := walk(data, n, h.Overhead)
	if err != nil {
		return nil, err
	}
	if len(markers) < 2 || markers[len(markers)-2].sector != n-3 {
		return nil, bad("the stream does not end with the footer marker")
	}
	if err := p.readTables(data, n, markers); err != nil {
		return nil, err
	}
	return p, nil
}

// readFooter checks the last three sectors: footer marker, footer, EOS.
func readFooter(data []byte, n uint64, h rawHeader) (rawHeader, error) {
	eos := data[(n-1)*SectorSize:]
	if !allZero(eos) {
		return rawHeader{}, bad("the last sector is not the end-of-stream marker")
	}
	m := readMarker(data, n-3)
	if m.val != 1 || m.size != 0 || m.typ != markerFooter {
		return rawHeader{}, bad("no footer marker before the footer: %+v", m)
	}
	f, err := parseHeader(data[(n-2)*SectorSize : (n-1)*SectorSize])
	if err != nil {
		return f, fmt.Errorf("footer: %w", err)
	}
	if f.GDOffset == gdAtEnd {
		return f, bad("footer gdOffset is GD_AT_END")
	}
	same := f
	same.GDOffset = h.GDOffset
	if same != h {
		return f, bad("footer %+v differs from header %+v beyond gdOffset", f, h)
	}
	return f, nil
}

func readMarker(data []byte, s uint64) marker {
	b := data[s*SectorSize:]
	return marker{
		sector: s,
		val:    binary.LittleEndian.Uint64(b),
		size:   binary.LittleEndian.Uint32(b[8:]),
		typ:    binary.LittleEndian.Uint32(b[12:]),
	}
}

// walk reads the stream from sector start as ESXi does, marker by marker,
// and requires it to end with the end-of-stream marker in the last sector.
func walk(data []byte, n, start uint64) ([]marker, error) {
	var out []marker
	for s := start; s < n; {
		m := readMarker(data, s)
		out = append(out, m)
		var next uint64
		switch {
		case m.size != 0: // a grain: marker and data, to the next sector
			next = s + (uint64(grainMarkerSize)+uint64(m.size)+SectorSize-1)/SectorSize
		case m.typ == markerEOS && m.val == 0:
			if !allZero(data[s*SectorSize : (s+1)*SectorSize]) {
				return nil, bad("end-of-stream marker at sector %d has bytes", s)
			}
			if s != n-1 {
				return nil, bad("end-of-stream marker at sector %d of %d", s, n)
			}
			return out, nil
		case m.typ == markerGT || m.typ == markerGD || m.typ == markerFooter:
			if m.val == 0 || m.val > n {
				return nil, bad("marker at sector %d covers %d sectors", s, m.val)
			}
			next = s + 1 + m.val
		default:
			return nil, bad("unknown marker %+v at sector %d", m, s)
		}
		if next > n || next <= s {
			return nil, bad("marker at sector %d reaches past the end", s)
		}
		s = next
	}
	return nil, bad("no end-of-stream marker")
}

// readTables follows the footer's grain directory to the grain tables and
// grains, checks they are the stream's, and fills p.raw.
func (p *parsed) readTables(data []byte, n uint64, markers []marker) error {
	capacity := p.footer.Capacity
	grains := (capacity + GrainSectors - 1) / GrainSectors
	tables := (grains + gtesPerGT - 1) / gtesPerGT
	gdSectors := (tables*4 + SectorSize - 1) / SectorSize
	at := map[uint64]marker{}
	for _, m := range markers {
		at[m.sector] = m
	}
	gd := p.footer.GDOffset
	if gd == 0 || gd >= n || gdSectors > n-gd {
		return bad("grain directory at %d of %d sectors", gd, n)
	}
	if m, ok := at[gd-1]; !ok || m.typ != markerGD || m.size != 0 || m.val != gdSectors {
		return bad("no GD marker for %d sectors before the grain directory", gdSectors)
	}
	p.raw = make([]byte, capacity*SectorSize)
	lastLBA := int64(-1)
	for t := range tables {
		gt := uint64(binary.LittleEndian.Uint32(data[gd*SectorSize+4*t:]))
		if m, ok := at[gt-1]; gt == 0 || !ok || m.typ != markerGT || m.size != 0 || m.val != gtSectors {
			return bad("grain table %d at sector %d has no GT marker", t, gt)
		}
		for i := range uint64(gtesPerGT) {
			grain := t*gtesPerGT + i
			s := uint64(binary.LittleEndian.Uint32(data[gt*SectorSize+4*i:]))
			if s == 0 {
				continue
			}
			if grain >= grains {
				return bad("grain table %d has an entry past the disk's end", t)
			}
			m, ok := at[s]
			if !ok || m.size == 0 || m.val != grain*GrainSectors || int64(m.val) <= lastLBA {
				return bad("grain %d: entry %d is not its grain marker in stream order", grain, s)
			}
			lastLBA = int64(m.val)
			if err := p.inflate(data, m, capacity); err != nil {
				return err
			}
			p.grains++
		}
	}
	for _, m := range markers {
		if m.size != 0 && m.val >= capacity {
			return bad("grain marker for LBA %d past the capacity", m.val)
		}
	}
	return nil
}

func (p *parsed) inflate(data []byte, m marker, capacity uint64) error {
	start := m.sector*SectorSize + grainMarkerSize
	z, err := zlib.NewReader(bytes.NewReader(data[start : start+uint64(m.size)]))
	if err != nil {
		return bad("grain at LBA %d: %v", m.val, err)
	}
	want := min(GrainSectors, capacity-m.val) * SectorSize
	got, err := io.ReadAll(io.LimitReader(z, grainBytes+1))
	if err == nil {
		err = z.Close()
	}
	if err != nil || uint64(len(got)) != want {
		return bad("grain at LBA %d: %d bytes inflated, want %d (%v)", m.val, len(got), want, err)
	}
	copy(p.raw[m.val*SectorSize:], got)
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
