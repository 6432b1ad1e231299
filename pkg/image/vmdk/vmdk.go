// Package vmdk writes a raw disk image as a streamOptimized VMDK, the
// subformat vSphere imports from an OVA, following VMware's Virtual Disk
// Format 1.1 specification.
//
// The file is written front to back, never seeking, so it can go straight
// into a pipe: the header (version 3, compressed grains with markers, the
// grain directory "at the end"), the embedded descriptor, then for every
// 32 MiB of the disk its non-zero 64 KiB grains, each zlib-compressed
// behind a grain marker (its first sector and compressed length), and the
// grain table behind a GT marker; then the grain directory behind a GD
// marker, the footer (the header with the grain directory's real offset)
// behind a footer marker, and the end-of-stream marker. The same input
// gives the same bytes: the compression level is fixed, and the
// descriptor's content ID is derived from the input, not drawn at random.
//
// qemu-img writes this subformat too, but vCenter and ESXi have refused its
// output often enough (siderolabs/talos#7651, #8148, #8672,
// siderolabs/image-factory#232, flatcar/scripts#540, qemu#1357) that this
// writer does what they expect:
//   - version 3 in the header: ESXi refuses version 1 stream files
//     ("sparse VMDK version too old");
//   - the footer and the end-of-stream marker are the file's last two
//     sectors (qemu-img once omitted the end-of-stream marker, and ESXi's
//     OVF import failed);
//   - nothing follows the end-of-stream marker, and a grain is padded to
//     the next sector, not to the grain size: qemu-img pre-zeroed whole
//     grains, which could leave bytes past the end of the stream (qemu
//     fixed it in 2025); that is the likely cause of the manifest digest
//     mismatch ovftool reported and of the Content Library's "Pipe
//     closed" on Talos' qemu-img OVAs, both gone with VMware's converter;
//   - no redundant grain directory: the flag is clear and rgdOffset is 0;
//   - a descriptor with VMware's own fields (see descriptor).
//
// All-zero grains are not stored: their grain table entries are 0, which
// reads as zeros.
package vmdk

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"

	"golang.org/x/sync/errgroup"
)

// compressionLevel is fixed so that the same input gives the same bytes.
const compressionLevel = 6

// Stats describes a written VMDK.
type Stats struct {
	// Capacity is the virtual disk's size in bytes: the raw image's.
	Capacity int64
	// Populated is the number of bytes in the grains stored, before
	// compression: the disk's allocated size once deployed.
	Populated int64
	// Size is the number of bytes written: the VMDK file's size.
	Size int64
}

// Option configures Write.
type Option func(*options) error

type options struct {
	progress func(done, total int64)
	adapter  Adapter
	extent   string
	workers  int
}

// WithProgress has Write call fn after every 32 MiB of the raw image, with
// the bytes of it done so far and its size.
func WithProgress(fn func(done, total int64)) Option {
	return func(o *options) error {
		o.progress = fn
		return nil
	}
}

// WithAdapter sets the descriptor's ddb.adapterType (default
// AdapterLSILogic, as VMware's converter writes; an OVF's controller
// decides the VM's).
func WithAdapter(a Adapter) Option {
	return func(o *options) error {
		if !a.valid() {
			return fmt.Errorf("%w: adapter %q (use %q, %q or %q)", ErrOption, a, AdapterIDE, AdapterBusLogic, AdapterLSILogic)
		}
		o.adapter = a
		return nil
	}
}

// WithExtentName sets the file name the descriptor's extent line names:
// the VMDK's own name (default "disk.vmdk").
func WithExtentName(name string) Option {
	return func(o *options) error {
		if name == "" || len(name) > 255 || strings.ContainsAny(name, "\"/\\\n\r\x00") {
			return fmt.Errorf("%w: extent name %q (a file name without quotes or slashes)", ErrOption, name)
		}
		o.extent = name
		return nil
	}
}

// WithConcurrency sets how many grains are compressed at once (default
// GOMAXPROCS). The output does not depend on it.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d (at least 1)", ErrOption, n)
		}
		o.workers = n
		return nil
	}
}

// Write writes the raw disk image r, size bytes long (a multiple of 512),
// to w as a streamOptimized VMDK. r is read twice: once to derive the
// content ID the descriptor at the start of the file carries, once to
// compress it.
func Write(ctx context.Context, w io.Writer, r io.ReaderAt, size int64, opts ...Option) (Stats, error) {
	o := options{adapter: AdapterLSILogic, extent: "disk.vmdk", workers: runtime.GOMAXPROCS(0)}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return Stats{}, err
		}
	}
	if size <= 0 || size%SectorSize != 0 {
		return Stats{}, fmt.Errorf("%w: %d bytes", ErrSize, size)
	}
	cid, long, err := contentID(ctx, r, size)
	if err != nil {
		return Stats{}, fmt.Errorf("derive content ID: %w", err)
	}
	capacity := uint64(size / SectorSize)
	cyl, heads, sectors := o.adapter.geometry(capacity)
	desc := descriptor{
		cid: cid, longCID: long, capacity: capacity, extent: o.extent,
		adapter: o.adapter, cylinders: cyl, heads: heads, sectors: sectors,
	}.String()
	if len(desc) > descriptorSectors*SectorSize {
		return Stats{}, fmt.Errorf("%w: descriptor of %d bytes", ErrOption, len(desc))
	}

	s := &stream{w: bufio.NewWriterSize(w, 1<<20)}
	h := header{capacity: capacity, gdOffset: gdAtEnd, overhead: overheadSectors, descSize: descriptorSectors, descStart: 1}
	s.write(h.marshal())
	s.write([]byte(desc))
	s.write(make([]byte, (overheadSectors-s.sector())*SectorSize))

	g := newGrainWriter(r, size, o)
	gd, populated, err := g.writeTables(ctx, s)
	if err != nil {
		return Stats{}, err
	}
	gdBytes := make([]byte, 4*len(gd))
	for i, e := range gd {
		binary.LittleEndian.PutUint32(gdBytes[4*i:], e)
	}
	s.write(metadataMarker(markerGD, uint64(sectorsFor(len(gdBytes)))))
	h.gdOffset = s.sector()
	s.write(gdBytes)
	s.write(metadataMarker(markerFooter, 1))
	s.write(h.marshal())
	s.write(metadataMarker(markerEOS, 0))
	if err := s.flush(); err != nil {
		return Stats{}, fmt.Errorf("write VMDK: %w", err)
	}
	return Stats{Capacity: size, Populated: populated, Size: s.n}, nil
}

// contentID derives the descriptor's CID and ddb.longContentID from the
// SHA-256 of the input. The CID avoids ffffffff and fffffffe, which some
// readers take as "no parent" or "all zeros"; the long ID ends with it, as
// VMware's do.
func contentID(ctx context.Context, r io.ReaderAt, size int64) (uint32, [16]byte, error) {
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			return 0, [16]byte{}, err
		}
		p := buf[:min(int64(len(buf)), size-off)]
		if err := readAt(r, p, off); err != nil {
			return 0, [16]byte{}, err
		}
		h.Write(p)
	}
	sum := h.Sum(nil)
	cid := binary.BigEndian.Uint32(sum)
	if cid >= 0xfffffffe {
		cid &^= 1 << 31
	}
	var long [16]byte
	copy(long[:12], sum[4:])
	binary.BigEndian.PutUint32(long[12:], cid)
	return cid, long, nil
}

func readAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read the raw image at byte %d: %w", off, err)
}

// sectorsFor returns the sectors n bytes occupy.
func sectorsFor(n int) int { return (n + SectorSize - 1) / SectorSize }

// stream writes sector-padded blocks and counts them; the first error
// sticks and ends the writing.
type stream struct {
	w    *bufio.Writer
	n    int64
	err  error
	zero [SectorSize]byte
}

// write writes b and pads it with zeros to the next sector boundary.
func (s *stream) write(b []byte) {
	if s.err != nil {
		return
	}
	_, s.err = s.w.Write(b)
	if rem := len(b) % SectorSize; rem != 0 && s.err == nil {
		_, s.err = s.w.Write(s.zero[:SectorSize-rem])
	}
	s.n += int64(sectorsFor(len(b)) * SectorSize)
}

// sector is the sector the next write starts at.
func (s *stream) sector() uint64 { return uint64(s.n / SectorSize) }

func (s *stream) flush() error {
	if s.err != nil {
		return s.err
	}
	return s.w.Flush()
}

// grainWriter compresses the raw image one grain table's worth (32 MiB)
// at a time, its grains in parallel, and writes them in order.
type grainWriter struct {
	r     io.ReaderAt
	size  int64
	o     options
	chunk []byte
	out   []bytes.Buffer // the chunk's compressed grains with their markers
	store []bool         // whether out[i] is stored (the grain is not all zeros)
	zw    []*zlib.Writer // one per worker
	zero  []byte         // a grain of zeros
}

func newGrainWriter(r io.ReaderAt, size int64, o options) *grainWriter {
	g := &grainWriter{
		r: r, size: size, o: o,
		chunk: make([]byte, gtBytes),
		out:   make([]bytes.Buffer, gtesPerGT),
		store: make([]bool, gtesPerGT),
		zw:    make([]*zlib.Writer, o.workers),
		zero:  make([]byte, grainBytes),
	}
	for i := range g.zw {
		// NewWriterLevel fails only for an invalid level.
		g.zw[i], _ = zlib.NewWriterLevel(io.Discard, compressionLevel)
	}
	return g
}

// writeTables writes every grain and grain table and returns the grain
// directory and the bytes of the grains stored.
func (g *grainWriter) writeTables(ctx context.Context, s *stream) ([]uint32, int64, error) {
	tables := int((g.size + gtBytes - 1) / gtBytes)
	gd := make([]uint32, tables)
	gt := make([]byte, gtSectors*SectorSize)
	var populated int64
	for t := range tables {
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("write VMDK: %w", err)
		}
		off := int64(t) * gtBytes
		data := g.chunk[:min(gtBytes, g.size-off)]
		if err := readAt(g.r, data, off); err != nil {
			return nil, 0, err
		}
		if err := g.compress(data, uint64(off/SectorSize)); err != nil {
			return nil, 0, fmt.Errorf("compress grains at byte %d: %w", off, err)
		}
		clear(gt)
		for i := range grainsIn(len(data)) {
			if !g.store[i] {
				continue
			}
			if s.sector() > math.MaxUint32 {
				return nil, 0, ErrTooLarge
			}
			binary.LittleEndian.PutUint32(gt[4*i:], uint32(s.sector()))
			s.write(g.out[i].Bytes())
			populated += int64(min(grainBytes, len(data)-i*grainBytes))
		}
		s.write(metadataMarker(markerGT, gtSectors))
		if s.sector() > math.MaxUint32 {
			return nil, 0, ErrTooLarge
		}
		gd[t] = uint32(s.sector())
		s.write(gt)
		if s.err != nil {
			return nil, 0, fmt.Errorf("write VMDK: %w", s.err)
		}
		if g.o.progress != nil {
			g.o.progress(off+int64(len(data)), g.size)
		}
	}
	return gd, populated, nil
}

// compress fills out and store for the grains of data, whose first sector
// is lba. The last grain of the disk may be short: only its sectors are
// compressed, as VMware's converter does.
func (g *grainWriter) compress(data []byte, lba uint64) error {
	grains := grainsIn(len(data))
	var eg errgroup.Group
	for w := range min(g.o.workers, grains) {
		eg.Go(func() error {
			zw := g.zw[w]
			for i := w; i < grains; i += g.o.workers {
				grain := data[i*grainBytes : min((i+1)*grainBytes, len(data))]
				g.store[i] = !bytes.Equal(grain, g.zero[:len(grain)])
				if !g.store[i] {
					continue
				}
				if err := compressGrain(zw, &g.out[i], grain, lba+uint64(i*GrainSectors)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// compressGrain writes the grain marker and the zlib stream of grain to
// buf.
func compressGrain(zw *zlib.Writer, buf *bytes.Buffer, grain []byte, lba uint64) error {
	buf.Reset()
	buf.Write(make([]byte, grainMarkerSize))
	zw.Reset(buf)
	if _, err := zw.Write(grain); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint64(b[0:], lba)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-grainMarkerSize))
	return nil
}

// grainsIn returns the grains n bytes of the disk occupy.
func grainsIn(n int) int { return (n + grainBytes - 1) / grainBytes }
