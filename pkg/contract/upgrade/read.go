package upgrade

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// File is an upgrade file that Open found well formed. Nothing in it is
// trusted yet: Verify checks the signature and the parts.
type File struct {
	r        io.ReaderAt
	name     string
	manifest Manifest
	raw      []byte // manifest.json's bytes
	sig      []byte // manifest.json.sig's bytes
	parts    []section
}

// section is where a part's data lies in the file.
type section struct {
	info   PartInfo
	offset int64
}

// Option sets an optional input of Open.
type Option func(*options) error

type options struct {
	name string
}

// WithName names the file in errors (its path, or the device it is on).
// The default is "upgrade file".
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("WithName: empty name")
		}
		o.name = name
		return nil
	}
}

// Open reads the structure of the upgrade file of size bytes that r
// holds, and its manifest and signature, without reading the parts. It
// accepts only what Write writes (see the package documentation); its
// errors are *Error values wrapping ErrMalformed, ErrTruncated,
// ErrUnsupportedFormat or ErrUnsigned, or an I/O error of r.
func Open(r io.ReaderAt, size int64, opts ...Option) (*File, error) {
	o := options{name: "upgrade file"}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("open upgrade file: %w", err)
		}
	}
	p := &parser{r: r, size: size, name: o.name}
	return p.parse()
}

// Name is the name the file's errors give it.
func (f *File) Name() string { return f.name }

// Manifest returns the file's manifest, not verified yet.
func (f *File) Manifest() Manifest { return f.manifest.clone() }

// Signer returns the key the signature says it was made with, not
// verified: only Verify tells whether the key made it and is trusted.
func (f *File) Signer() (signature.PublicKey, error) {
	// The signature file's second line is "key ed25519:<base64>".
	lines := strings.Split(string(f.sig), "\n")
	if len(lines) >= 2 {
		if text, ok := strings.CutPrefix(lines[1], "key "); ok {
			if k, err := signature.ParsePublicKey(text); err == nil {
				return k, nil
			}
		}
	}
	return signature.PublicKey{}, &Error{File: f.name, Member: SignatureName, Detail: "no signer key in it", Err: ErrMalformed}
}

func (m Manifest) clone() Manifest {
	m.Parts = append([]PartInfo(nil), m.Parts...)
	return m
}

// parser reads an upgrade file from the start, member by member.
type parser struct {
	r    io.ReaderAt
	size int64
	name string
	off  int64 // where the next header starts
}

// fail returns an *Error about the file.
func (p *parser) fail(member string, err error, format string, args ...any) *Error {
	return &Error{File: p.name, Member: member, Detail: fmt.Sprintf(format, args...), Err: err}
}

func (p *parser) parse() (*File, error) {
	if p.size < 0 {
		return nil, p.fail("", ErrMalformed, "negative size %d", p.size)
	}
	f := &File{r: p.r, name: p.name}
	if err := p.readManifest(f); err != nil {
		return nil, err
	}
	if err := p.readSignature(f); err != nil {
		return nil, err
	}
	for _, info := range f.manifest.Parts {
		off, err := p.member(f, info.Name, info.Size)
		if err != nil {
			return nil, err
		}
		f.parts = append(f.parts, section{info: info, offset: off})
	}
	if err := p.end(f); err != nil {
		return nil, err
	}
	return f, nil
}

// readManifest reads the first member, manifest.json.
func (p *parser) readManifest(f *File) error {
	block, err := p.block(ManifestName)
	if err != nil {
		return err
	}
	name, size, ok := parseHeader(block)
	switch {
	case !ok || isZero(block):
		return p.fail("", ErrMalformed, "it does not start with a tar header")
	case name != ManifestName:
		return p.fail("", ErrMalformed, "the first member is %q, not %s", name, ManifestName)
	case size > MaxManifestSize:
		return p.fail(ManifestName, ErrMalformed, "%d bytes, more than the %d a manifest may have", size, MaxManifestSize)
	}
	data, err := p.data(ManifestName, size)
	if err != nil {
		return err
	}
	m, err := ParseManifest(data)
	if errors.Is(err, ErrUnsupportedFormat) {
		return p.fail(ManifestName, ErrUnsupportedFormat, "%s", detail(err, ErrUnsupportedFormat))
	} else if err != nil {
		return p.fail(ManifestName, ErrMalformed, "%v", err)
	}
	f.manifest, f.raw = m, data
	return p.checkHeader(f, block, ManifestName, size, 0)
}

// readSignature reads the second member, manifest.json.sig.
func (p *parser) readSignature(f *File) error {
	start := p.off
	block, err := p.block(SignatureName)
	if err != nil {
		return err
	}
	name, size, ok := parseHeader(block)
	if !ok || name != SignatureName {
		if _, isPart := f.manifest.Part(name); ok && (isPart || isZero(block)) {
			return p.fail(SignatureName, ErrUnsigned, "the member after %s is missing", ManifestName)
		}
		return p.unexpected(f, block, SignatureName)
	}
	if size > signature.MaxFileSize {
		return p.fail(SignatureName, ErrMalformed, "%d bytes, more than the %d a signature may have", size, signature.MaxFileSize)
	}
	if f.sig, err = p.data(SignatureName, size); err != nil {
		return err
	}
	return p.checkHeader(f, block, SignatureName, size, start)
}

// member reads the header of the next member, which must be the part
// name of size bytes, skips its data and returns where the data starts.
func (p *parser) member(f *File, name string, size int64) (int64, error) {
	start := p.off
	block, err := p.block(name)
	if err != nil {
		return 0, err
	}
	got, gotSize, ok := parseHeader(block)
	if !ok || got != name {
		return 0, p.unexpected(f, block, name)
	}
	if gotSize != size {
		return 0, p.fail(name, ErrMalformed, "it holds %d bytes and the manifest says %d", gotSize, size)
	}
	if err := p.checkHeader(f, block, name, size, start); err != nil {
		return 0, err
	}
	off := p.off
	if err := p.skip(name, size); err != nil {
		return 0, err
	}
	return off, nil
}

// end checks the end-of-archive marker and that nothing follows it.
func (p *parser) end(f *File) error {
	for range 2 {
		block, err := p.block("")
		if err != nil {
			return err
		}
		if !isZero(block) {
			return p.unexpected(f, block, "")
		}
	}
	if p.off != p.size {
		return p.fail("", ErrMalformed, "%d bytes follow the end of the archive", p.size-p.off)
	}
	return nil
}

// unexpected explains the header block found where want (a member name,
// or "" for the end of the archive) was expected.
func (p *parser) unexpected(f *File, block []byte, want string) error {
	name, _, ok := parseHeader(block)
	wanted := "the end of the archive"
	if want != "" {
		wanted = "member " + want
	}
	switch {
	case !ok:
		return p.fail("", ErrMalformed, "at byte %d, where %s belongs, there is no tar header", p.off-blockSize, wanted)
	case isZero(block):
		return p.fail(want, ErrMalformed, "the archive ends where %s belongs", wanted)
	case name == ManifestName || name == SignatureName || p.seen(f, name):
		return p.fail("", ErrMalformed, "a second member %q at byte %d, where %s belongs", name, p.off-blockSize, wanted)
	}
	if _, isPart := f.manifest.Part(name); isPart {
		return p.fail("", ErrMalformed, "member %q at byte %d, where %s belongs: the parts are not in the manifest's order", name, p.off-blockSize, wanted)
	}
	return p.fail("", ErrMalformed, "unknown member %q at byte %d, where %s belongs", name, p.off-blockSize, wanted)
}

// seen reports whether part name was read already.
func (p *parser) seen(f *File, name string) bool {
	for _, s := range f.parts {
		if s.info.Name == name {
			return true
		}
	}
	return false
}

// checkHeader compares a member's header block, read at offset start,
// with the one Write makes.
func (p *parser) checkHeader(f *File, block []byte, name string, size, start int64) error {
	mtime, err := f.manifest.BuildTime()
	if err != nil {
		return p.fail(ManifestName, ErrMalformed, "%v", err)
	}
	want, err := headerBlock(name, size, mtime)
	if err != nil {
		return p.fail(name, ErrMalformed, "no header can be made for it: %v", err)
	}
	if i := firstDifference(block, want); i >= 0 {
		return p.fail(name, ErrMalformed, "its header (at byte %d) differs from the one imagebuild writes, at byte %d (%s)", start, i, headerField(i))
	}
	return nil
}

// block reads the next 512-byte block, a header of member (or of the end
// of the archive, for "").
func (p *parser) block(member string) ([]byte, error) {
	b := make([]byte, blockSize)
	if err := p.read(member, b, p.off); err != nil {
		return nil, err
	}
	p.off += blockSize
	return b, nil
}

// data reads the data of a small member and checks its padding.
func (p *parser) data(member string, size int64) ([]byte, error) {
	b := make([]byte, size)
	if err := p.read(member, b, p.off); err != nil {
		return nil, err
	}
	p.off += size
	return b, p.pad(member, size)
}

// skip passes over the data of a part, checking that the file holds it,
// and checks its padding.
func (p *parser) skip(member string, size int64) error {
	if size > p.size-p.off {
		return p.truncated(member)
	}
	p.off += size
	return p.pad(member, size)
}

// pad reads and checks the zero padding after size bytes of data.
func (p *parser) pad(member string, size int64) error {
	b := make([]byte, padding(size))
	if err := p.read(member, b, p.off); err != nil {
		return err
	}
	if !isZero(b) {
		return p.fail(member, ErrMalformed, "the padding after its data is not zeros")
	}
	p.off += int64(len(b))
	return nil
}

// read fills b from offset off, failing with ErrTruncated when the file
// ends before.
func (p *parser) read(member string, b []byte, off int64) error {
	if int64(len(b)) > p.size-off {
		return p.truncated(member)
	}
	n, err := p.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return p.truncated(member)
	}
	return p.fail(member, err, "read at byte %d", off)
}

func (p *parser) truncated(member string) error {
	if member == "" {
		return p.fail("", ErrTruncated, "the file ends at byte %d, before the end of the archive", p.size)
	}
	return p.fail(member, ErrTruncated, "the file ends at byte %d, before the end of the member", p.size)
}

// parseHeader returns the name and size a ustar header block records,
// and whether it is one (a zero block is one, of no name).
func parseHeader(b []byte) (name string, size int64, ok bool) {
	if isZero(b) {
		return "", 0, true
	}
	name = string(b[:100])
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	field := strings.TrimRight(string(b[124:136]), "\x00 ")
	size, err := strconv.ParseInt(field, 8, 64)
	if err != nil || size < 0 || name == "" {
		return "", 0, false
	}
	return name, size, true
}

// headerField names the ustar header field at byte i.
func headerField(i int) string {
	fields := []struct {
		end  int
		name string
	}{{100, "name"}, {108, "mode"}, {116, "uid"}, {124, "gid"}, {136, "size"}, {148, "mtime"},
		{156, "checksum"}, {157, "type"}, {257, "link name"}, {265, "magic and version"},
		{297, "user name"}, {329, "group name"}, {345, "device numbers"}, {500, "name prefix"}}
	for _, f := range fields {
		if i < f.end {
			return f.name
		}
	}
	return "padding"
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// detail returns err's message without the text of the sentinel it
// wraps at its end.
func detail(err, sentinel error) string {
	return strings.TrimSuffix(err.Error(), ": "+sentinel.Error())
}
