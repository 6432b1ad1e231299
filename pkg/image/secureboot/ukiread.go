package secureboot

import (
	"debug/pe"
	"fmt"
	"io"
	"sort"
)

// UKISections lists the sections ReadUKI returns.
func UKISections() []string {
	return []string{SectionOSRel, SectionCmdline, SectionUname, SectionInitrd, SectionLinux}
}

// ReadUKI reads a UKI of size bytes (signed or not) and returns the exact
// content of its UKI sections (UKISections) that are present, by name:
// the build's check of what it wrote, and a reader of UKIs from outside
// (an upgrade file's). It checks what a firmware's loader relies on: a
// PE32+ x86-64 image whose sections do not overlap and lie inside the
// image size and their raw data inside the file; each UKI section at the
// section alignment, its raw data at the file alignment, its content no
// longer than its raw data; and a .linux section. Errors wrap
// ErrMalformed.
func ReadUKI(r io.ReaderAt, size int64) (map[string][]byte, error) {
	secs, err := readUKI(r, size)
	if err != nil {
		return nil, fmt.Errorf("read UKI: %w", err)
	}
	return secs, nil
}

func readUKI(r io.ReaderAt, size int64) (map[string][]byte, error) {
	f, err := pe.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	defer f.Close()
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok || f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
		return nil, fmt.Errorf("%w: not a PE32+ x86-64 image", ErrMalformed)
	}
	sa, fa := oh.SectionAlignment, oh.FileAlignment
	if fa == 0 || fa&(fa-1) != 0 || sa < fa || sa&(sa-1) != 0 {
		return nil, fmt.Errorf("%w: section alignment %#x, file alignment %#x", ErrMalformed, sa, fa)
	}
	wanted := map[string]bool{}
	for _, n := range UKISections() {
		wanted[n] = true
	}
	if err := checkLayout(f.Sections, oh, size, wanted); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, s := range f.Sections {
		h := s.SectionHeader
		if !wanted[h.Name] {
			continue
		}
		if _, dup := out[h.Name]; dup {
			return nil, fmt.Errorf("%w: two %s sections", ErrMalformed, h.Name)
		}
		if h.VirtualSize > h.Size {
			return nil, fmt.Errorf("%w: section %s: %d bytes of content in %d bytes of raw data", ErrMalformed, h.Name, h.VirtualSize, h.Size)
		}
		b := make([]byte, h.VirtualSize)
		if _, err := r.ReadAt(b, int64(h.Offset)); err != nil {
			return nil, fmt.Errorf("section %s: %w", h.Name, err)
		}
		out[h.Name] = b
	}
	if _, ok := out[SectionLinux]; !ok {
		return nil, fmt.Errorf("%w: no %s section", ErrMalformed, SectionLinux)
	}
	return out, nil
}

// checkLayout checks that sections do not overlap and lie inside the
// image and the file of size bytes, and that the UKI sections (wanted) are
// at the alignments.
func checkLayout(sections []*pe.Section, oh *pe.OptionalHeader64, size int64, wanted map[string]bool) error {
	sa, fa := oh.SectionAlignment, oh.FileAlignment
	byVA := append([]*pe.Section(nil), sections...)
	sort.SliceStable(byVA, func(i, j int) bool { return byVA[i].VirtualAddress < byVA[j].VirtualAddress })
	prevEnd, prev := uint64(oh.SizeOfHeaders), "the headers"
	for _, s := range byVA {
		h := s.SectionHeader
		span := uint64(max(h.VirtualSize, 1))
		if h.VirtualSize == 0 {
			span = uint64(max(h.Size, 1)) // linkers that leave VirtualSize 0 mean the raw size
		}
		end := uint64(h.VirtualAddress) + span
		switch {
		case wanted[h.Name] && h.VirtualAddress%sa != 0:
			return fmt.Errorf("%w: section %s at %#x, not at the section alignment %#x", ErrMalformed, h.Name, h.VirtualAddress, sa)
		case uint64(h.VirtualAddress) < prevEnd:
			return fmt.Errorf("%w: section %s at %#x overlaps %s", ErrMalformed, h.Name, h.VirtualAddress, prev)
		case end > uint64(oh.SizeOfImage):
			return fmt.Errorf("%w: section %s ends at %#x, past the image size %#x", ErrMalformed, h.Name, end, oh.SizeOfImage)
		case h.Size > 0 && (wanted[h.Name] && h.Offset%fa != 0 || int64(h.Offset)+int64(h.Size) > size):
			return fmt.Errorf("%w: section %s: raw data at %#x+%#x is not aligned or not in the file", ErrMalformed, h.Name, h.Offset, h.Size)
		}
		prevEnd, prev = end, h.Name
	}
	return nil
}
