package upgrade

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/terrarium-os/terrarium/pkg/contract/readahead"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// Verified is an upgrade file whose manifest is signed by a trusted key
// and whose parts matched the manifest when Verify read them (or, made
// by VerifySignature, are checked only as they are copied). It hands out
// the parts for writing into a slot, through CopyPart, which checks
// each part again as it copies it.
type Verified struct {
	f      *File
	signer signature.PublicKey
}

// Verify checks that the manifest is signed by one of the trusted keys
// and then reads every part through SHA-256 and compares it with the
// manifest. Its errors are *Error values wrapping ErrMalformed (of the
// signature), ErrUnknownKey, ErrBadSignature or ErrHashMismatch (naming
// the part), ctx's error, or an I/O error of the file. Nothing is to be
// written from the file before Verify returns a Verified.
func (f *File) Verify(ctx context.Context, trusted []signature.PublicKey) (*Verified, error) {
	signer, err := f.verifySignature(trusted)
	if err != nil {
		return nil, err
	}
	for _, s := range f.parts {
		if err := f.copySection(ctx, io.Discard, s); err != nil {
			return nil, err
		}
	}
	return &Verified{f: f, signer: signer}, nil
}

// VerifySignature checks that the manifest is signed by one of the
// trusted keys, and reads no part: each part is checked only as CopyPart
// copies it, which fails with ErrHashMismatch or ErrTruncated on the
// first part that differs. It is for a file the node fetched or copied
// itself from one a person brought, whose parts go nowhere but into a
// slot that is not booted until every part was checked (CopyPart, or a
// read-back hashed against the manifest): reading the file twice (once
// to check, once to write) costs a whole pass over it. A file a person
// brings is checked with Verify before anything is written, or its parts
// are copied each checked against the manifest's digest of it into a
// place that keeps what matched (the upgrade share). Its errors are
// Verify's, but ErrHashMismatch.
func (f *File) VerifySignature(trusted []signature.PublicKey) (*Verified, error) {
	signer, err := f.verifySignature(trusted)
	if err != nil {
		return nil, err
	}
	return &Verified{f: f, signer: signer}, nil
}

// verifySignature checks the manifest's signature and returns its key,
// naming the file in its errors.
func (f *File) verifySignature(trusted []signature.PublicKey) (signature.PublicKey, error) {
	key, err := signature.Verify(f.sig, signedData(f.raw), trusted)
	if err == nil {
		return key, nil
	}
	fail := func(member string, sentinel, ours error) (signature.PublicKey, error) {
		return signature.PublicKey{}, &Error{File: f.name, Member: member, Detail: detail(err, sentinel), Err: ours}
	}
	switch {
	case errors.Is(err, signature.ErrMalformed):
		return fail(SignatureName, signature.ErrMalformed, ErrMalformed)
	case errors.Is(err, signature.ErrUnknownKey):
		return fail(SignatureName, signature.ErrUnknownKey, ErrUnknownKey)
	case errors.Is(err, signature.ErrBadSignature):
		return fail(ManifestName, signature.ErrBadSignature, ErrBadSignature)
	}
	return signature.PublicKey{}, &Error{File: f.name, Member: SignatureName, Err: err}
}

// copySection copies a part to dst, hashing it, and fails with
// ErrHashMismatch when it does not match the manifest.
func (f *File) copySection(ctx context.Context, dst io.Writer, s section) error {
	// The part is read and hashed ahead of dst's writes, on a goroutine
	// of its own: a slot written from the upgrade share (through
	// dm-crypt) does not wait for the hash, nor the hash for the write.
	h := sha256.New()
	r := io.TeeReader(io.NewSectionReader(f.r, s.offset, s.info.Size), h)
	n, err := readahead.Copy(ctx, dst, r)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("%s: part %s: %w", f.name, s.info.Name, err)
	case err != nil:
		return &Error{File: f.name, Member: s.info.Name, Detail: "copy", Err: err}
	case n != s.info.Size:
		return &Error{File: f.name, Member: s.info.Name, Detail: fmt.Sprintf("read %d of its %d bytes", n, s.info.Size), Err: ErrTruncated}
	}
	return f.checkSum(s, h)
}

// checkSum fails with ErrHashMismatch, naming the part, when h, the hash
// of part s as read, differs from the manifest's.
func (f *File) checkSum(s section, h hash.Hash) error {
	if got := hexSum(h); got != s.info.SHA256 {
		return &Error{File: f.name, Member: s.info.Name,
			Detail: fmt.Sprintf("sha256 %s, the manifest says %s", got, s.info.SHA256), Err: ErrHashMismatch}
	}
	return nil
}

// Manifest returns the verified manifest.
func (v *Verified) Manifest() Manifest { return v.f.manifest.clone() }

// SignedManifest returns manifest.json's and manifest.json.sig's bytes,
// as File.SignedManifest does: with the parts, all Assemble needs to make
// the file again.
func (v *Verified) SignedManifest() (manifest, sig []byte) { return v.f.SignedManifest() }

// Signer returns the trusted key that signed the manifest.
func (v *Verified) Signer() signature.PublicKey { return v.signer }

// Part returns a reader of the part of that name, and its manifest
// entry. Its bytes were verified by Verify (not by VerifySignature), and
// the file may have changed since: copy a part with CopyPart, which
// checks it again, or hash what is read.
func (v *Verified) Part(name string) (*io.SectionReader, PartInfo, error) {
	s, err := v.section(name)
	if err != nil {
		return nil, PartInfo{}, err
	}
	return io.NewSectionReader(v.f.r, s.offset, s.info.Size), s.info, nil
}

// CopyPart copies the part of that name to dst, hashing it again on the
// way, and fails with ErrHashMismatch (or ErrTruncated) when what it read
// differs from the manifest: the file changed after Verify. dst has then
// received bytes that must not be used (the slot must not be booted).
// It is the only check of a Verified that VerifySignature made.
func (v *Verified) CopyPart(ctx context.Context, dst io.Writer, name string) error {
	s, err := v.section(name)
	if err != nil {
		return err
	}
	return v.f.copySection(ctx, dst, s)
}

// CheckedPart returns a reader of the part of that name that is read in
// order, from its start to its end, hashing it: the read that reaches
// its end fails with ErrHashMismatch, naming the part, unless what was
// read matches the manifest. A copy made through it is to be kept only
// if that last read succeeded (Assemble over checked parts makes a file
// that is copied whole).
func (v *Verified) CheckedPart(name string) (io.ReaderAt, error) {
	s, err := v.section(name)
	if err != nil {
		return nil, err
	}
	return &checkedPart{f: v.f, s: s, h: sha256.New()}, nil
}

// checkedPart is CheckedPart's reader.
type checkedPart struct {
	f    *File
	s    section
	h    hash.Hash
	next int64
}

func (c *checkedPart) ReadAt(p []byte, off int64) (int, error) {
	if off != c.next {
		return 0, fmt.Errorf("%s: part %s read at %d, not where its last read ended (%d)", c.f.name, c.s.info.Name, off, c.next)
	}
	n, err := io.NewSectionReader(c.f.r, c.s.offset, c.s.info.Size).ReadAt(p, off)
	c.h.Write(p[:n])
	c.next += int64(n)
	if c.next == c.s.info.Size {
		if serr := c.f.checkSum(c.s, c.h); serr != nil {
			return n, fmt.Errorf("part %s differs from its signed manifest: %w", c.s.info.Name, serr)
		}
	}
	return n, err
}

func (v *Verified) section(name string) (section, error) {
	for _, s := range v.f.parts {
		if s.info.Name == name {
			return s, nil
		}
	}
	return section{}, fmt.Errorf("%s: no part %q; it has %s", v.f.name, name, partNames(v.f.manifest.Parts))
}

func partNames(parts []PartInfo) string {
	var s string
	for i, p := range parts {
		if i > 0 {
			s += ", "
		}
		s += p.Name
	}
	return s
}
