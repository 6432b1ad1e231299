package upgrade

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
)

// Assemble returns the upgrade file whose manifest.json holds manifest,
// whose manifest.json.sig holds sig and whose parts part opens, byte for
// byte as Write wrote it: a reader of size bytes that reads the parts
// through and makes the archive's headers, padding and end itself. A node
// that keeps an upgrade as its signed manifest and its parts, each under
// its digest (the upgrade share), reads the file with it without a copy
// of it. Nothing is checked here but that manifest parses: Open and Verify
// check what the reader gives as they check any file. A part that ends
// before the manifest's size of it makes a read of it fail with
// io.ErrUnexpectedEOF; an error of a part's reader is the read's, even
// when it read all it was asked for.
func Assemble(manifest, sig []byte, part func(PartInfo) (io.ReaderAt, error)) (io.ReaderAt, int64, error) {
	m, err := ParseManifest(manifest)
	if err != nil {
		return nil, 0, fmt.Errorf("assemble upgrade file: %w", err)
	}
	mtime, err := m.BuildTime()
	if err != nil {
		return nil, 0, fmt.Errorf("assemble upgrade file: %w", err)
	}
	a := &assembled{}
	member := func(name string, size int64, data io.ReaderAt) error {
		h, err := headerBlock(name, size, mtime)
		if err != nil {
			return fmt.Errorf("assemble upgrade file: %s: %w", name, err)
		}
		a.add(bytes.NewReader(h), blockSize)
		a.add(data, size)
		a.add(nil, padding(size))
		return nil
	}
	if err := member(ManifestName, int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return nil, 0, err
	}
	if err := member(SignatureName, int64(len(sig)), bytes.NewReader(sig)); err != nil {
		return nil, 0, err
	}
	for _, p := range m.Parts {
		r, err := part(p)
		if err != nil {
			return nil, 0, fmt.Errorf("assemble upgrade file: part %s: %w", p.Name, err)
		}
		if err := member(p.Name, p.Size, r); err != nil {
			return nil, 0, err
		}
	}
	a.add(nil, 2*blockSize) // the end of the archive
	return a, a.size, nil
}

// assembled is a file made of segments, read in place.
type assembled struct {
	segs []segment
	size int64
}

// segment is n bytes of r from its start at offset off of the file; a nil
// r reads as zeros.
type segment struct {
	off, n int64
	r      io.ReaderAt
}

func (a *assembled) add(r io.ReaderAt, n int64) {
	if n > 0 {
		a.segs = append(a.segs, segment{off: a.size, n: n, r: r})
		a.size += n
	}
}

// ReadAt implements io.ReaderAt.
func (a *assembled) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("assembled upgrade file: negative offset")
	}
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].off+a.segs[i].n > off })
	n := 0
	for ; n < len(p) && i < len(a.segs); i++ {
		s := a.segs[i]
		at := off + int64(n) - s.off
		want := min(int64(len(p)-n), s.n-at)
		buf := p[n : n+int(want)]
		if s.r == nil {
			clear(buf)
		} else if k, err := s.r.ReadAt(buf, at); k < len(buf) || err != nil && !errors.Is(err, io.EOF) {
			// A part that ends early, or whose reader fails (a part
			// checked as it is read, say), even with the bytes read.
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return n + k, err
		}
		n += len(buf)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
