package upgrade

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
)

// WholeFile returns a reader of the whole upgrade file, its first byte to
// its last, that checks every part against the signed manifest as it
// passes by: the Read that completes a part that differs fails with
// ErrHashMismatch naming it, one past a file cut short with ErrTruncated,
// and every Read after ctx's end with ctx's error. A copy of the file
// made through it to its io.EOF is as checked as Verify and then a copy:
// one pass over a stick, not two (upgradeshare's Share.Add of a file a
// person brought). Nothing read from it is to be used before its io.EOF.
func (v *Verified) WholeFile(ctx context.Context) io.Reader {
	return &wholeFile{ctx: ctx, f: v.f}
}

// wholeFile is WholeFile's reader.
type wholeFile struct {
	ctx  context.Context
	f    *File
	off  int64
	part int       // the next part not checked whole
	h    hash.Hash // part's hash so far, nil before its first byte
	err  error     // once failed, always
}

func (w *wholeFile) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	if w.off >= w.f.size {
		if err := w.checkedAll(); err != nil {
			w.err = err
			return 0, err
		}
		return 0, io.EOF
	}
	if rest := w.f.size - w.off; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := w.f.r.ReadAt(p, w.off)
	if err == io.EOF && n == len(p) {
		err = nil // the last bytes, read whole
	}
	if cerr := w.check(p[:n]); cerr != nil {
		w.err = cerr
		return 0, cerr
	}
	w.off += int64(n)
	switch {
	case err == io.EOF:
		w.err = w.truncated()
		return n, w.err
	case err != nil:
		w.err = &Error{File: w.f.name, Member: w.member(), Detail: fmt.Sprintf("read at byte %d", w.off), Err: err}
		return n, w.err
	}
	return n, nil
}

// check hashes b, the bytes at w.off, into the parts it overlaps, and
// compares each part it completes with the manifest.
func (w *wholeFile) check(b []byte) error {
	start, end := w.off, w.off+int64(len(b))
	for w.part < len(w.f.parts) {
		s := w.f.parts[w.part]
		pStart, pEnd := s.offset, s.offset+s.info.Size
		if pStart > end || pStart == end && pEnd > pStart {
			return nil // the part begins after b
		}
		lo, hi := max(pStart, start), min(pEnd, end)
		if w.h == nil {
			w.h = sha256.New()
		}
		if hi > lo {
			w.h.Write(b[lo-start : hi-start])
		}
		if pEnd > end {
			return nil // the part goes on past b
		}
		if err := w.f.checkSum(s, w.h); err != nil {
			return err
		}
		w.part, w.h = w.part+1, nil
	}
	return nil
}

// checkedAll fails unless every part was read whole and checked (a file
// whose size, as opened, ends within a part cannot be read whole).
func (w *wholeFile) checkedAll() error {
	if w.part < len(w.f.parts) {
		return w.truncated()
	}
	return nil
}

// truncated is the error of a file that ended before its size, naming the
// part it ended in.
func (w *wholeFile) truncated() error {
	return &Error{File: w.f.name, Member: w.member(), Detail: fmt.Sprintf("ended after %d of its %d bytes", w.off, w.f.size), Err: ErrTruncated}
}

// member names the part whose data holds byte w.off, "" between parts
// (the manifest, its signature, a member's header, padding).
func (w *wholeFile) member() string {
	if w.part < len(w.f.parts) {
		s := w.f.parts[w.part]
		if w.off >= s.offset && w.off < s.offset+s.info.Size {
			return s.info.Name
		}
	}
	return ""
}
