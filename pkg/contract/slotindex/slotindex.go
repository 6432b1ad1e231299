// Package slotindex is a slot's list of its own files: every path of the
// slot's root filesystem with its kind, mode, owner, and the SHA-256 of a
// file's bytes or a link's target. imagebuild writes it into the slot
// (layout.SlotIndexFile) as the last file before mksquashfs; a node reads
// the running slot's and a staged upgrade's to see what the upgrade
// changes without reading either slot whole.
//
// The format is text, one entry a line after a header, sorted by path:
//
//	terrarium-slot-index v1
//	d 0755 0 0 - - "/usr"
//	f 0755 0 0 81234 9f86d0...  "/usr/bin/kubelet"
//	l 0777 0 0 - - "/etc/localtime" "/usr/share/zoneinfo/Etc/UTC"
//
// Fields: the kind (f a regular file, d a directory, l a symbolic link, o
// anything else), the permission bits in octal (with setuid, setgid and
// sticky), the owner's and the group's numeric ids, a file's size and
// SHA-256 ("-" otherwise), the path, and a link's target, both quoted as
// Go strings. Extended attributes are not recorded.
package slotindex

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Header is the first line of an index.
const Header = "terrarium-slot-index v1"

// Kind is what an entry is.
type Kind byte

// The kinds of entries.
const (
	File  Kind = 'f'
	Dir   Kind = 'd'
	Link  Kind = 'l'
	Other Kind = 'o'
)

// Entry is one path of a slot.
type Entry struct {
	// Path is absolute and clean: "/usr/bin/kubelet".
	Path string
	Kind Kind
	// Mode holds the permission bits with setuid, setgid and sticky
	// (st_mode & 07777).
	Mode     uint32
	UID, GID uint32
	// Size and SHA256 (lowercase hex) describe a File's bytes.
	Size   int64
	SHA256 string
	// Target is a Link's target.
	Target string
}

// Index is a slot's entries, sorted by path.
type Index struct {
	Entries []Entry
}

// maxLine bounds a line of an index (two quoted paths and the fields).
const maxLine = 16 << 10

// Build lists the tree at root as a slot index, leaving out skip (an
// absolute path inside the tree, such as the index's own, or "").
func Build(ctx context.Context, root, skip string) (*Index, error) {
	ix := &Index{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		abs := path.Clean("/" + filepath.ToSlash(rel))
		if abs == skip {
			return nil
		}
		e, err := entryOf(p, abs)
		if err != nil {
			return fmt.Errorf("index %s: %w", abs, err)
		}
		ix.Entries = append(ix.Entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index the slot tree %s: %w", root, err)
	}
	ix.sort()
	return ix, nil
}

func entryOf(p, abs string) (Entry, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return Entry{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Entry{}, errors.New("no owner on this system")
	}
	e := Entry{Path: abs, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
	switch {
	case fi.Mode().IsRegular():
		e.Kind, e.Size = File, fi.Size()
		e.SHA256, err = FileSHA256(p)
	case fi.IsDir():
		e.Kind = Dir
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Kind = Link
		e.Target, err = os.Readlink(p)
	default:
		e.Kind = Other
	}
	return e, err
}

// FileSHA256 is the lowercase hex SHA-256 of the file at p, as an
// index records it.
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close() // read only
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (ix *Index) sort() {
	sort.Slice(ix.Entries, func(i, j int) bool { return ix.Entries[i].Path < ix.Entries[j].Path })
}

// WriteTo writes the index in its text form.
func (ix *Index) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	n, _ := bw.WriteString(Header + "\n")
	total := int64(n)
	for _, e := range ix.Entries {
		n, _ := bw.WriteString(e.line() + "\n")
		total += int64(n)
	}
	return total, bw.Flush()
}

func (e Entry) line() string {
	size, sum := "-", "-"
	if e.Kind == File {
		size, sum = strconv.FormatInt(e.Size, 10), e.SHA256
	}
	s := fmt.Sprintf("%c %04o %d %d %s %s %s", e.Kind, e.Mode, e.UID, e.GID, size, sum, strconv.Quote(e.Path))
	if e.Kind == Link {
		s += " " + strconv.Quote(e.Target)
	}
	return s
}

// Load reads the index at path.
func Load(path string) (*Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the slot index: %w", err)
	}
	defer f.Close() // read only
	return Parse(f, path)
}

// Parse reads an index in its text form; name (a file's path) is what
// its errors say it came from. Every line is checked: an index names each
// path once, in order, absolute and clean.
func Parse(r io.Reader, name string) (*Index, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, fmt.Errorf("%s: empty, not a slot index (its first line is %q)", name, Header)
	}
	if sc.Text() != Header {
		return nil, fmt.Errorf("%s:1: %.40q is not %q: not a slot index of this version", name, sc.Text(), Header)
	}
	ix := &Index{}
	for line := 2; sc.Scan(); line++ {
		e, err := parseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if n := len(ix.Entries); n > 0 && ix.Entries[n-1].Path >= e.Path {
			return nil, fmt.Errorf("%s:%d: %q comes after %q: the paths are not sorted, or one is named twice", name, line, e.Path, ix.Entries[n-1].Path)
		}
		ix.Entries = append(ix.Entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return ix, nil
}

func parseLine(s string) (Entry, error) {
	f := strings.SplitN(s, " ", 7)
	if len(f) != 7 {
		return Entry{}, fmt.Errorf("%.60q has %d fields, want kind, mode, uid, gid, size, sha256 and path", s, len(f))
	}
	var e Entry
	if len(f[0]) != 1 || !strings.Contains("fdlo", f[0]) {
		return Entry{}, fmt.Errorf("kind %.10q is none of f, d, l, o", f[0])
	}
	e.Kind = Kind(f[0][0])
	mode, err := strconv.ParseUint(f[1], 8, 32)
	if err != nil || mode > 0o7777 {
		return Entry{}, fmt.Errorf("mode %.10q is not octal permission bits", f[1])
	}
	e.Mode = uint32(mode)
	for i, dst := range []*uint32{&e.UID, &e.GID} {
		v, err := strconv.ParseUint(f[2+i], 10, 32)
		if err != nil {
			return Entry{}, fmt.Errorf("%s %.12q is not a numeric id", [...]string{"uid", "gid"}[i], f[2+i])
		}
		*dst = uint32(v)
	}
	if e.Kind == File {
		if e.Size, err = strconv.ParseInt(f[4], 10, 64); err != nil || e.Size < 0 {
			return Entry{}, fmt.Errorf("size %.24q is not a file's length", f[4])
		}
		if b, err := hex.DecodeString(f[5]); err != nil || len(b) != sha256.Size || strings.ToLower(f[5]) != f[5] {
			return Entry{}, fmt.Errorf("sha256 %.70q is not 64 lowercase hex digits", f[5])
		}
		e.SHA256 = f[5]
	} else if f[4] != "-" || f[5] != "-" {
		return Entry{}, fmt.Errorf("a %c entry has size %.24q and sha256 %.70q, want - and -", e.Kind, f[4], f[5])
	}
	rest := f[6]
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return Entry{}, fmt.Errorf("path %.60q is not a quoted string", rest)
	}
	e.Path, _ = strconv.Unquote(q)
	rest = rest[len(q):]
	if e.Path == "" || e.Path[0] != '/' || path.Clean(e.Path) != e.Path {
		return Entry{}, fmt.Errorf("path %q is not absolute and clean", e.Path)
	}
	if e.Kind == Link {
		if !strings.HasPrefix(rest, " ") {
			return Entry{}, fmt.Errorf("link %q has no target", e.Path)
		}
		rest = rest[1:]
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return Entry{}, fmt.Errorf("link %q: target %.60q is not a quoted string", e.Path, rest)
		}
		e.Target, _ = strconv.Unquote(q)
		rest = rest[len(q):]
	}
	if rest != "" {
		return Entry{}, fmt.Errorf("%q: %.40q follows the last field", e.Path, rest)
	}
	return e, nil
}

// Change is a path two indexes disagree on: Old is nil when the path is
// new, New nil when it is gone.
type Change struct {
	Path     string
	Old, New *Entry
}

// Diff lists the paths whose entries differ from old to next, in path
// order.
func Diff(old, next *Index) []Change {
	var out []Change
	i, j := 0, 0
	for i < len(old.Entries) || j < len(next.Entries) {
		switch {
		case j == len(next.Entries) || (i < len(old.Entries) && old.Entries[i].Path < next.Entries[j].Path):
			out = append(out, Change{Path: old.Entries[i].Path, Old: &old.Entries[i]})
			i++
		case i == len(old.Entries) || next.Entries[j].Path < old.Entries[i].Path:
			out = append(out, Change{Path: next.Entries[j].Path, New: &next.Entries[j]})
			j++
		default:
			if old.Entries[i] != next.Entries[j] {
				out = append(out, Change{Path: old.Entries[i].Path, Old: &old.Entries[i], New: &next.Entries[j]})
			}
			i++
			j++
		}
	}
	return out
}
