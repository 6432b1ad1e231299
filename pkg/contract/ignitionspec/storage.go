package ignitionspec

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"sort"

	"github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/vincent-petithory/dataurl"
)

// Limits on decoded contents: a config is read whole into memory, and a
// small gzip data: URL can hold a very large file.
const (
	maxFileSize  = 32 << 20
	maxTotalSize = 128 << 20
)

// Ignition's modes when a config gives none.
const (
	defaultFileMode = 0o644
	defaultDirMode  = 0o755
)

// storage maps storage.directories, files and links, sorted by path so
// that a parent comes before what it holds (as Ignition does).
func (m *mapper) storage(s types.Storage) ([]Directory, []File, []Link) {
	// kinds records what the config puts at each path, to refuse an
	// entry under a file or a link of the config.
	kinds := map[string]string{}
	var dirs []Directory
	for i, d := range s.Directories {
		at := index("$.storage.directories", i)
		m.checkPath(at, d.Path)
		kinds[d.Path] = "directory"
		dirs = append(dirs, Directory{
			Path: d.Path, Mode: mode(d.Mode, defaultDirMode), Owner: m.owner(at, d.Node), Overwrite: isTrue(d.Overwrite), At: at,
		})
	}
	var files []File
	for i, f := range s.Files {
		at := index("$.storage.files", i)
		m.checkPath(at, f.Path)
		kinds[f.Path] = "file"
		if len(f.Append) > 0 {
			m.unsupported(field(at, "append"), "Terrarium applies a config again at every boot, and an append would repeat; "+
				"give the whole file as contents with overwrite: true, or use a drop-in directory (/etc/NAME.d)")
		}
		file := File{Path: f.Path, Mode: mode(f.Mode, defaultFileMode), Owner: m.owner(at, f.Node), Overwrite: isTrue(f.Overwrite), At: at}
		if f.Contents.Source != nil {
			file.HasContents = true
			file.Contents = m.contents(field(at, "contents"), f.Contents)
		}
		files = append(files, file)
	}
	var links []Link
	for i, l := range s.Links {
		at := index("$.storage.links", i)
		m.checkPath(at, l.Path)
		kinds[l.Path] = "link"
		if isTrue(l.Hard) {
			m.unsupported(field(at, "hard"), "Terrarium makes symbolic links only; a hard link cannot cross from the slot to /var")
		}
		link := Link{Path: l.Path, Owner: m.owner(at, l.Node), Overwrite: isTrue(l.Overwrite), At: at}
		if l.Target != nil {
			link.Target = *l.Target
		}
		links = append(links, link)
	}
	m.checkParents("$.storage.directories", kinds, pathsOf(dirs, func(d Directory) string { return d.Path }))
	m.checkParents("$.storage.files", kinds, pathsOf(files, func(f File) string { return f.Path }))
	m.checkParents("$.storage.links", kinds, pathsOf(links, func(l Link) string { return l.Path }))
	sort.SliceStable(dirs, func(i, j int) bool { return dirs[i].Path < dirs[j].Path })
	sort.SliceStable(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	sort.SliceStable(links, func(i, j int) bool { return links[i].Path < links[j].Path })
	return dirs, files, links
}

func pathsOf[T any](entries []T, p func(T) string) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = p(e)
	}
	return out
}

// checkPath refuses a path the config may not write.
func (m *mapper) checkPath(at, p string) {
	if why := pathProblem(p); why != "" {
		m.unsupported(field(at, "path"), "%s %s", p, why)
	}
}

// checkParents refuses an entry whose parent is a file or a link of the
// config (the library refuses one under a link; a file cannot hold one).
func (m *mapper) checkParents(at string, kinds map[string]string, paths []string) {
	for i, p := range paths {
		for dir := path.Dir(p); dir != "/" && dir != "."; dir = path.Dir(dir) {
			if kinds[dir] == "file" {
				m.malformed(field(index(at, i), "path"), "%s is under %s, which is a file of the config", p, dir)
				break
			}
		}
	}
}

// owner maps a node's user and group, by name or by ID.
func (m *mapper) owner(at string, n types.Node) Owner {
	var o Owner
	switch {
	case n.User.Name != nil && *n.User.Name != "":
		o.User = *n.User.Name
		m.checkName(field(at, "user.name"), o.User)
	case n.User.ID != nil:
		o.UID = *n.User.ID
		m.checkID(field(at, "user.id"), o.UID, true)
	}
	switch {
	case n.Group.Name != nil && *n.Group.Name != "":
		o.Group = *n.Group.Name
		m.checkName(field(at, "group.name"), o.Group)
	case n.Group.ID != nil:
		o.GID = *n.Group.ID
		m.checkID(field(at, "group.id"), o.GID, true)
	}
	return o
}

// contents decodes a resource: a data: URL (remote sources are refused),
// gzip-compressed or not, checked against its verification hash.
func (m *mapper) contents(at string, r types.Resource) []byte {
	src := *r.Source
	if scheme := sourceScheme(src); scheme != "data" {
		m.unsupported(field(at, "source"), "%s URLs are not fetched: the node is air-gapped; "+
			"give the contents inline as a data: URL (Butane's contents.local or contents.inline does this)", scheme)
		return nil
	}
	du, err := dataurl.DecodeString(src)
	if err != nil {
		m.malformed(field(at, "source"), "not a data: URL: %v", err)
		return nil
	}
	data := du.Data
	if r.Compression != nil && *r.Compression != "" {
		if *r.Compression != "gzip" {
			m.malformed(field(at, "compression"), "%q is not a compression Terrarium reads (gzip)", *r.Compression)
			return nil
		}
		if data, err = gunzip(data); err != nil {
			m.malformed(field(at, "source"), "gzip: %v", err)
			return nil
		}
	}
	if len(data) > maxFileSize {
		m.malformed(field(at, "source"), "holds more than %d MiB; a config carries small files", maxFileSize>>20)
		return nil
	}
	if m.total += len(data); m.total > maxTotalSize {
		m.malformed(field(at, "source"), "the config's contents add up to more than %d MiB; a config carries small files", maxTotalSize>>20)
		return nil
	}
	m.verify(field(at, "verification.hash"), r.Verification, data)
	if data == nil {
		data = []byte{}
	}
	return data
}

// gunzip decompresses data, up to maxFileSize bytes.
func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(out) > maxFileSize {
		return nil, fmt.Errorf("decompresses to more than %d MiB; a config carries small files", maxFileSize>>20)
	}
	return out, zr.Close()
}

// verify checks decoded (decompressed) contents against their hash, as
// Ignition does.
func (m *mapper) verify(at string, v types.Verification, data []byte) {
	fn, want, err := v.HashParts()
	if err != nil || fn == "" {
		return // the library reported a malformed hash
	}
	var h hash.Hash
	switch fn {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return
	}
	h.Write(data)
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		m.malformed(at, "the contents' %s is %s, not %s", fn, got, want)
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// mode is a config's mode as a permission, or def when unset. Setuid,
// setgid and sticky bits are refused with the library's warning.
func mode(m *int, def fs.FileMode) fs.FileMode {
	if m == nil {
		return def
	}
	return fs.FileMode(*m) & fs.ModePerm
}
