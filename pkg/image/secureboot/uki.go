package secureboot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"unicode"
)

// UKI is what a unified kernel image is made of: systemd-stub with the
// kernel, the initramfs and the kernel command line (and the os-release
// that names the entry) as PE sections. Signed, it lets the firmware check
// all of them at once, and systemd-stub under Secure Boot ignores a
// command line the boot loader passes.
type UKI struct {
	// Stub is the host path of systemd-stub (linuxx64.efi.stub of
	// systemd-boot-efi): the image's own, so stub and systemd-boot match.
	Stub      string
	Kernel    string // host path of the kernel (an EFI-stub PE: starts "MZ")
	Initrd    string // host path of the initramfs
	Cmdline   string // the whole command line, the slot's argument included
	OSRelease string // os-release text for .osrel; none if empty
	Uname     string // the kernel release for .uname; none if empty
}

// The UKI's sections, in the order ukify writes them: the small ones
// first, the kernel last.
const (
	SectionOSRel   = ".osrel"
	SectionCmdline = ".cmdline"
	SectionUname   = ".uname"
	SectionInitrd  = ".initrd"
	SectionLinux   = ".linux"
)

// PE section characteristics (PE format, "Section Flags").
const (
	scnCntCode            = 0x00000020
	scnCntInitializedData = 0x00000040
	scnMemRead            = 0x40000000
)

// newSection is a section WriteUKI appends: its content is a host file or
// literal bytes.
type newSection struct {
	name string
	path string
	data []byte
	size int64
}

func (u UKI) sections() ([]newSection, error) {
	if u.Cmdline == "" {
		return nil, errors.New("no command line: a UKI without one would take the boot loader's")
	}
	for _, c := range u.Cmdline {
		if unicode.IsControl(c) {
			return nil, fmt.Errorf("command line %q: a control character", u.Cmdline)
		}
	}
	var secs []newSection
	lit := func(name, s string) {
		if s != "" {
			secs = append(secs, newSection{name: name, data: []byte(s), size: int64(len(s))})
		}
	}
	lit(SectionOSRel, u.OSRelease)
	lit(SectionCmdline, u.Cmdline)
	lit(SectionUname, u.Uname)
	for _, f := range []struct{ name, path string }{{SectionInitrd, u.Initrd}, {SectionLinux, u.Kernel}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() || fi.Size() == 0 {
			return nil, fmt.Errorf("%s: not a regular file with content", f.path)
		}
		secs = append(secs, newSection{name: f.name, path: f.path, size: fi.Size()})
	}
	magic := make([]byte, 2)
	if err := readStart(u.Kernel, magic); err != nil || string(magic) != "MZ" {
		return nil, fmt.Errorf("%s: not an EFI-stub kernel (no MZ header)", u.Kernel)
	}
	return secs, nil
}

// readStart reads the first len(b) bytes of the file at path.
func readStart(path string, b []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.ReadFull(f, b)
	return err
}

// WriteUKI writes the UKI u to out. As ukify does, it appends the sections
// to the stub's PE image (the stub itself unchanged but for its header):
// section headers into the header's free room, each section's data at the
// end of the file at the file alignment, its address after the image's
// last at the section alignment; the image size, section count and
// initialized-data size follow, and the checksum is zero. The same inputs
// give the same bytes.
func WriteUKI(u UKI, out string) error {
	if err := writeUKI(u, out); err != nil {
		return fmt.Errorf("write UKI %s: %w", out, err)
	}
	return nil
}

func writeUKI(u UKI, out string) (err error) {
	secs, err := u.sections()
	if err != nil {
		return err
	}
	stub, err := os.ReadFile(u.Stub)
	if err != nil {
		return fmt.Errorf("systemd-stub: %w", err)
	}
	img, err := parseStub(stub)
	if err != nil {
		return fmt.Errorf("systemd-stub %s: %w", u.Stub, err)
	}
	hdrs, err := img.append(secs)
	if err != nil {
		return fmt.Errorf("systemd-stub %s: %w", u.Stub, err)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(out)
		}
	}()
	if _, err := f.Write(img.data); err != nil {
		return err
	}
	for i, s := range secs {
		if err := writeSection(f, s, hdrs[i]); err != nil {
			return fmt.Errorf("section %s: %w", s.name, err)
		}
	}
	return nil
}

// writeSection writes s's content at its place and pads it to its raw
// size; a file that changed size since it was measured is an error.
func writeSection(f *os.File, s newSection, h sectionHeader) error {
	if _, err := f.Seek(int64(h.rawOffset), io.SeekStart); err != nil {
		return err
	}
	var n int64
	if s.path == "" {
		m, err := f.Write(s.data)
		if err != nil {
			return err
		}
		n = int64(m)
	} else {
		in, err := os.Open(s.path)
		if err != nil {
			return err
		}
		n, err = io.Copy(f, io.LimitReader(in, s.size+1))
		_ = in.Close()
		if err != nil {
			return err
		}
	}
	if n != s.size {
		return fmt.Errorf("%s changed size while being read (%d bytes, then %d)", s.path, s.size, n)
	}
	_, err := f.Write(make([]byte, int64(h.rawSize)-n))
	return err
}

// sectionHeader is the part of an IMAGE_SECTION_HEADER that places it.
type sectionHeader struct {
	virtualSize, virtualAddress, rawSize, rawOffset uint32
}

// peImage is a stub's bytes and the offsets of the header fields WriteUKI
// changes (PE32+).
type peImage struct {
	data                  []byte
	coff, opt, secTable   int
	nSections             int
	fileAlign, sectAlign  uint32
	imageEnd, headerLimit uint32
	sizeOfHeaders         uint32
	names                 map[string]bool
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

// parseStub reads the headers of a PE32+ x86-64 image that has room for
// new sections: no symbol table, no signature, raw data at the file
// alignment. Errors wrap ErrMalformed.
func parseStub(b []byte) (*peImage, error) {
	bad := func(format string, args ...any) (*peImage, error) {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	le := binary.LittleEndian
	if len(b) < 0x40 || string(b[:2]) != "MZ" {
		return bad("not a PE image (no MZ header)")
	}
	img := &peImage{data: bytes.Clone(b), names: map[string]bool{}}
	pe := int(le.Uint32(b[0x3c:]))
	img.coff = pe + 4
	img.opt = img.coff + 20
	if pe < 0x40 || img.opt+144+8 > len(b) || string(b[pe:pe+4]) != "PE\x00\x00" {
		return bad("no PE header")
	}
	c, o := b[img.coff:], b[img.opt:]
	switch {
	case le.Uint16(c) != 0x8664:
		return bad("machine %#04x, not x86-64", le.Uint16(c))
	case le.Uint16(o) != 0x20b:
		return bad("not PE32+")
	case le.Uint32(o[108:]) > 4 && (le.Uint32(o[144:]) != 0 || le.Uint32(o[148:]) != 0):
		return bad("signed already: sign the UKI, not the stub")
	}
	if err := img.stripSymbols(); err != nil {
		return nil, err
	}
	img.nSections = int(le.Uint16(c[2:]))
	img.secTable = img.opt + int(le.Uint16(c[16:]))
	img.sectAlign, img.fileAlign = le.Uint32(o[32:]), le.Uint32(o[36:])
	if img.fileAlign == 0 || img.fileAlign&(img.fileAlign-1) != 0 || img.sectAlign < img.fileAlign || img.sectAlign&(img.sectAlign-1) != 0 {
		return bad("section alignment %#x, file alignment %#x", img.sectAlign, img.fileAlign)
	}
	if img.secTable+40*img.nSections > len(b) {
		return bad("the section table runs past the end")
	}
	if dirs := le.Uint32(o[108:]); img.secTable < img.opt+112 || uint64(dirs)*8+112 > uint64(le.Uint16(c[16:])) {
		return bad("optional header of %d bytes for %d data directories", le.Uint16(c[16:]), dirs)
	}
	img.sizeOfHeaders = uint32(alignUp(uint64(le.Uint32(o[60:])), uint64(img.fileAlign)))
	img.headerLimit = img.sizeOfHeaders
	var end uint64
	for i := range img.nSections {
		s := b[img.secTable+40*i:]
		name := string(bytes.TrimRight(s[:8], "\x00"))
		vsize, va, rsize, roff := le.Uint32(s[8:]), le.Uint32(s[12:]), le.Uint32(s[16:]), le.Uint32(s[20:])
		if rsize > 0 {
			if roff%img.fileAlign != 0 || rsize%img.fileAlign != 0 || uint64(roff)+uint64(rsize) > uint64(len(img.data)) {
				return bad("section %s: raw data at %#x+%#x is not aligned or not in the file", name, roff, rsize)
			}
			img.headerLimit = min(img.headerLimit, roff)
		}
		img.names[name] = true
		end = max(end, uint64(va)+uint64(max(vsize, rsize)))
	}
	img.imageEnd = uint32(min(end, math.MaxUint32))
	return img, nil
}

// stripSymbols drops a COFF symbol table (and its string table) at the
// end of the image, as ukify does: an image file should have none, and
// older stubs (systemd 252's) still carry one. One elsewhere is an error.
func (img *peImage) stripSymbols() error {
	le := binary.LittleEndian
	c := img.data[img.coff:]
	ptr, n := uint64(le.Uint32(c[8:])), uint64(le.Uint32(c[12:]))
	if ptr == 0 && n == 0 {
		return nil
	}
	end := ptr + 18*n
	if end+4 <= uint64(len(img.data)) {
		end += uint64(le.Uint32(img.data[end:])) // the string table's size counts itself
	}
	if ptr == 0 || end != uint64(len(img.data)) {
		return fmt.Errorf("%w: a symbol table that is not at the end of the file: strip the stub", ErrMalformed)
	}
	img.data = img.data[:ptr]
	le.PutUint32(c[8:], 0)
	le.PutUint32(c[12:], 0)
	le.PutUint16(c[18:], le.Uint16(c[18:])|0x0008) // IMAGE_FILE_LOCAL_SYMS_STRIPPED
	return nil
}

// append adds the section headers of secs (whose data follows img.data)
// and updates the header; it returns the new sections' placement.
func (img *peImage) append(secs []newSection) ([]sectionHeader, error) {
	le := binary.LittleEndian
	tableEnd := img.secTable + 40*(img.nSections+len(secs))
	if tableEnd > int(img.headerLimit) {
		return nil, fmt.Errorf("%w: no room in the header for %d more sections", ErrMalformed, len(secs))
	}
	for _, z := range img.data[img.secTable+40*img.nSections : tableEnd] {
		if z != 0 {
			return nil, fmt.Errorf("%w: the room after the section table is not empty", ErrMalformed)
		}
	}
	fileOff := alignUp(uint64(len(img.data)), uint64(img.fileAlign))
	img.data = append(img.data, make([]byte, fileOff-uint64(len(img.data)))...)
	va := alignUp(uint64(img.imageEnd), uint64(img.sectAlign))
	initData := uint64(le.Uint32(img.data[img.opt+8:]))
	hdrs := make([]sectionHeader, len(secs))
	for i, s := range secs {
		if img.names[s.name] {
			return nil, fmt.Errorf("%w: the stub has a %s section already", ErrMalformed, s.name)
		}
		raw := alignUp(uint64(s.size), uint64(img.fileAlign))
		if va+uint64(s.size) > math.MaxUint32 || fileOff+raw > math.MaxUint32 {
			return nil, fmt.Errorf("section %s: the image would pass 4 GiB", s.name)
		}
		hdrs[i] = sectionHeader{virtualSize: uint32(s.size), virtualAddress: uint32(va), rawSize: uint32(raw), rawOffset: uint32(fileOff)}
		h := img.data[img.secTable+40*(img.nSections+i):]
		copy(h[:8], s.name)
		le.PutUint32(h[8:], hdrs[i].virtualSize)
		le.PutUint32(h[12:], hdrs[i].virtualAddress)
		le.PutUint32(h[16:], hdrs[i].rawSize)
		le.PutUint32(h[20:], hdrs[i].rawOffset)
		flags := uint32(scnCntInitializedData | scnMemRead)
		if s.name == SectionLinux {
			flags = scnCntCode | scnMemRead // as ukify: a kernel run in place by the EFI handover protocol
		}
		le.PutUint32(h[36:], flags)
		initData += uint64(s.size)
		fileOff += raw
		va = alignUp(va+uint64(s.size), uint64(img.sectAlign))
	}
	if va > math.MaxUint32 {
		return nil, errors.New("the image would pass 4 GiB")
	}
	le.PutUint16(img.data[img.coff+2:], uint16(img.nSections+len(secs)))
	le.PutUint32(img.data[img.opt+8:], uint32(min(initData, math.MaxUint32)))
	le.PutUint32(img.data[img.opt+56:], uint32(va))        // SizeOfImage
	le.PutUint32(img.data[img.opt+60:], img.sizeOfHeaders) // SizeOfHeaders
	le.PutUint32(img.data[img.opt+64:], 0)                 // CheckSum
	return hdrs, nil
}
