package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"
)

// A volume backup holds one node's local volumes (the local-path
// StorageClass's volume area): terrarium-volumes-<cluster>-<node>-<time>.age,
// an age file encrypted to the node's VolumesPassphrase, holding a tar of
//
//	manifest.json          what the backup is (VolumesManifest)
//	volumes/<volume>/...   each volume's tree: directories, regular files
//	                       and symbolic links, with their owner, mode and
//	                       modification time
//
// A volume is a directory at the top of the area (pvc-<uid>_<namespace>_<claim>).
const (
	// VolumesKind is the kind of a volume backup's manifest.
	VolumesKind = "VolumeBackup"
	// VolumesPrefix starts a volume backup's file name; Suffix ends it.
	VolumesPrefix = "terrarium-volumes-"
	// VolumesDir holds the volumes in the archive.
	VolumesDir = "volumes"
	// MaxVolumesManifest bounds a volume backup's manifest.
	MaxVolumesManifest = 4 << 20
	// MaxVolumes bounds how many volumes one backup lists.
	MaxVolumes = 10000
)

// VolumesManifest says what a volume backup holds.
type VolumesManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Cluster, CACertHash and Node name the node whose volumes these are.
	Cluster    string `json:"cluster"`
	CACertHash string `json:"caCertHash"`
	Node       string `json:"node"`
	// TakenAt is when the copy began (UTC).
	TakenAt time.Time `json:"takenAt"`
	// Release is the image version the node ran.
	Release string `json:"release,omitempty"`
	// Volumes are the volumes, by name, as found when the copy began.
	Volumes []Volume `json:"volumes"`
}

// Volume is one volume of a backup: its directory's name in the area, and
// how many files and bytes it held when the copy began.
type Volume struct {
	Name  string `json:"name"`
	Files int64  `json:"files"`
	Bytes int64  `json:"bytes"`
}

var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// IsVolumeName reports whether name may name a volume: a directory at the
// top of the area that is neither hidden nor ext4's lost+found (no '+').
func IsVolumeName(name string) bool { return volumeNameRE.MatchString(name) }

// VolumesFileName is the name of a volume backup of node's volumes in
// cluster, taken at t.
func VolumesFileName(cluster, node string, t time.Time) string {
	return VolumesPrefix + fileSafe(cluster) + "-" + fileSafe(node) + "-" + t.UTC().Format(timeInName) + Suffix
}

// ParseVolumesFileName is the node and time of a volume backup's file
// name (a base name) in cluster; ok is false for any other name.
func ParseVolumesFileName(name, cluster string) (node string, t time.Time, ok bool) {
	stem, ok := strings.CutPrefix(name, VolumesPrefix+fileSafe(cluster)+"-")
	if !ok || path.Base(name) != name {
		return "", time.Time{}, false
	}
	stem, ok = strings.CutSuffix(stem, Suffix)
	if !ok || len(stem) < len(timeInName)+2 || stem[len(stem)-len(timeInName)-1] != '-' {
		return "", time.Time{}, false
	}
	t, err := time.Parse(timeInName, stem[len(stem)-len(timeInName):])
	if err != nil {
		return "", time.Time{}, false
	}
	return stem[:len(stem)-len(timeInName)-1], t, true
}

// NewestVolumes picks, among names (base names of one directory), the
// newest volume backup of node in cluster; ok is false when there is none.
func NewestVolumes(names []string, cluster, node string) (string, bool) {
	best, bestT := "", time.Time{}
	for _, n := range names {
		got, t, ok := ParseVolumesFileName(n, cluster)
		if !ok || got != fileSafe(node) {
			continue
		}
		if best == "" || t.After(bestT) || (t.Equal(bestT) && n > best) {
			best, bestT = n, t
		}
	}
	return best, best != ""
}

func fileSafe(s string) string {
	return strings.Trim(fileSafeRE.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// ParseVolumesManifest reads and checks a volume backup's manifest.
func ParseVolumesManifest(b []byte) (*VolumesManifest, error) {
	return parseManifest[VolumesManifest](b)
}

func (m *VolumesManifest) check() error {
	switch {
	case m.APIVersion != APIVersion || m.Kind != VolumesKind:
		return fmt.Errorf("apiVersion/kind is %q/%q, want %s/%s: not a Terrarium volume backup", m.APIVersion, m.Kind, APIVersion, VolumesKind)
	case len(m.Volumes) > MaxVolumes:
		return fmt.Errorf("volumes: %d, more than %d", len(m.Volumes), MaxVolumes)
	}
	if err := checkWhose(m.Cluster, m.CACertHash, m.Node, m.TakenAt); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, v := range m.Volumes {
		switch {
		case !IsVolumeName(v.Name):
			return fmt.Errorf("volumes[%d]: %q is not a volume's name", i, v.Name)
		case seen[v.Name]:
			return fmt.Errorf("volumes[%d]: %s twice", i, v.Name)
		case v.Files < 0 || v.Bytes < 0:
			return fmt.Errorf("volumes[%d]: negative counts", i)
		}
		seen[v.Name] = true
	}
	return nil
}

// VolumesScan is what ScanVolumes found in a volume area.
type VolumesScan struct {
	// Volumes are the area's volumes, by name.
	Volumes []Volume
	// ArchiveBytes bounds the size of the backup written of them now:
	// every entry's tar header and its data rounded up to tar's blocks,
	// age's overhead, and room for the manifest.
	ArchiveBytes int64
}

// ScanVolumes lists the volumes of the area at dir (the directories at
// its top that IsVolumeName accepts) with their files and bytes.
func ScanVolumes(dir string) (VolumesScan, error) {
	area, err := os.OpenRoot(dir)
	if err != nil {
		return VolumesScan{}, fmt.Errorf("the volume area: %w", err)
	}
	defer area.Close()
	names, err := ListVolumes(dir)
	if err != nil {
		return VolumesScan{}, fmt.Errorf("the volume area: %w", err)
	}
	if len(names) > MaxVolumes {
		return VolumesScan{}, fmt.Errorf("the volume area holds %d volumes, more than a backup carries (%d)", len(names), MaxVolumes)
	}
	var s VolumesScan
	entries := int64(0)
	for _, name := range names {
		v := Volume{Name: name}
		err := fs.WalkDir(area.FS(), name, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			entries++
			if d.Type().IsRegular() {
				fi, err := d.Info()
				if err != nil {
					return err
				}
				v.Files++
				v.Bytes += fi.Size()
				s.ArchiveBytes += (fi.Size() + 511) &^ 511
			}
			return nil
		})
		if err != nil {
			return VolumesScan{}, fmt.Errorf("the volume %s: %w", name, err)
		}
		s.Volumes = append(s.Volumes, v)
	}
	// A PAX header and the entry's own: at most 1.5 KiB each for the
	// names a volume holds; age adds 16 bytes to every 64 KiB.
	s.ArchiveBytes += entries*1536 + MaxVolumesManifest + 1024
	s.ArchiveBytes += s.ArchiveBytes/(64<<10)*16 + 4096
	return s, nil
}

// ListVolumes are the volumes at the top of dir (directories IsVolumeName
// accepts), sorted; none when dir does not exist.
func ListVolumes(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && IsVolumeName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// VolumesWritten is what WriteVolumes copied.
type VolumesWritten struct {
	Files, Bytes int64
	// Changed counts the files whose size changed while they were
	// copied: each is copied at the size it had when its copy began (cut
	// short, or padded with zeros when it shrank).
	Changed int
	// Skipped counts what a backup does not carry: sockets, pipes and
	// device nodes.
	Skipped int
}

// WriteVolumes writes a volume backup of the area at dir to w: m (whose
// Volumes it fills in from scan), then every volume of scan as it is now,
// encrypted to passphrase. Each volume is read through its own os.Root,
// so no symbolic link inside it leads the copy out of the volume, and no
// file is opened through a link. ctx stops it between two files.
func WriteVolumes(ctx context.Context, w io.Writer, passphrase string, m VolumesManifest, dir string, scan VolumesScan) (VolumesWritten, error) {
	m.APIVersion, m.Kind = APIVersion, VolumesKind
	m.TakenAt = m.TakenAt.UTC()
	m.Volumes = scan.Volumes
	if m.Volumes == nil {
		m.Volumes = []Volume{}
	}
	if err := m.check(); err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return VolumesWritten{}, err
	}
	area, err := os.OpenRoot(dir)
	if err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: the volume area: %w", err)
	}
	defer area.Close()

	rcp, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	rcp.SetWorkFactor(scryptWorkFactor)
	enc, err := age.Encrypt(w, rcp)
	if err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	tw := tar.NewWriter(enc)
	hdr := &tar.Header{Name: ManifestName, Mode: 0o600, Size: int64(len(manifest)), Typeflag: tar.TypeReg, ModTime: m.TakenAt, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	if _, err := tw.Write(manifest); err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	var res VolumesWritten
	for _, v := range m.Volumes {
		if err := writeVolume(ctx, tw, area, v.Name, &res); err != nil {
			return VolumesWritten{}, fmt.Errorf("writing a volume backup: the volume %s: %w", v.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	if err := enc.Close(); err != nil {
		return VolumesWritten{}, fmt.Errorf("writing a volume backup: %w", err)
	}
	return res, nil
}

// writeVolume adds the volume name of area to tw.
func writeVolume(ctx context.Context, tw *tar.Writer, area *os.Root, name string, res *VolumesWritten) error {
	vol, err := area.OpenRoot(name)
	if err != nil {
		return err
	}
	defer vol.Close()
	return fs.WalkDir(vol.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := vol.Lstat(p)
		if err != nil {
			return err
		}
		member := path.Join(VolumesDir, name, p)
		hdr := &tar.Header{Name: member, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		if fi.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, member+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := vol.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			return writeFile(tw, vol, p, hdr, res)
		default:
			res.Skipped++
			return nil
		}
	})
}

// writeFile adds the regular file p of vol, opened without following a
// link, at the size it has once open.
func writeFile(tw *tar.Writer, vol *os.Root, p string, hdr *tar.Header, res *VolumesWritten) error {
	f, err := vol.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() { // replaced since it was listed
		res.Skipped++
		return nil
	}
	hdr.Typeflag, hdr.Size, hdr.ModTime = tar.TypeReg, fi.Size(), fi.ModTime()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(tw, f, fi.Size())
	changed := errors.Is(err, io.EOF)
	if changed { // it shrank: the rest as zeros
		_, err = io.CopyN(tw, zeros{}, fi.Size()-n)
	}
	if err != nil {
		return err
	}
	if after, err := f.Stat(); err == nil && after.Size() != fi.Size() {
		changed = true
	}
	if changed {
		res.Changed++
	}
	res.Files++
	res.Bytes += fi.Size()
	return nil
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// ExtractVolumes decrypts the volume backup r with passphrase and writes
// its volumes into dir (created; it must not exist yet, or be empty), one
// directory per volume, each entry with its mode and modification time,
// and its owner when owners is set (the node's restore runs as root). A
// member outside a volume the manifest lists, a type other than a
// directory, a regular file or a symbolic link, a duplicate or a path
// through a link stops it with an error naming the member; what was
// written is left for the caller to remove with dir.
func ExtractVolumes(r io.Reader, passphrase, dir string, owners bool) (*VolumesManifest, error) {
	var m *VolumesManifest
	err := decryptInto(r, passphrase, dir, ErrNotThisNode, func(dec io.Reader, root *os.Root) error {
		var err error
		m, err = extractVolumesTar(dec, root, owners)
		return err
	})
	return m, err
}

// ErrNotThisNode says a volume backup does not decrypt under the node's
// volume backup passphrase.
var ErrNotThisNode = errors.New("the volume backup does not decrypt with this node's volume backup passphrase: it is another node's or another cluster's, or not a Terrarium volume backup")

// extractVolumesTar reads a volume backup's tar from r into root.
func extractVolumesTar(r io.Reader, root *os.Root, owners bool) (*VolumesManifest, error) {
	tr := tar.NewReader(r)
	mb, err := readManifest(tr, MaxVolumesManifest)
	if err != nil {
		return nil, err
	}
	m, err := ParseVolumesManifest(mb)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	for _, v := range m.Volumes {
		listed[v.Name] = true
	}
	var dirs []*tar.Header
	made := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the archive: %w", err)
		}
		name, err := memberPath(hdr, listed)
		if err != nil {
			return nil, err
		}
		if err := extractMember(root, tr, hdr, name, owners); err != nil {
			return nil, fmt.Errorf("%s: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			d := *hdr
			d.Name = name
			dirs = append(dirs, &d)
		}
		if !strings.Contains(name, "/") {
			made[name] = true
		}
	}
	if missing := absent(listed, made); len(missing) > 0 {
		return nil, fmt.Errorf("the archive lacks the volumes %v its manifest lists", missing)
	}
	// A directory's mode and time last: writing into it moved its time,
	// and a directory without write permission would have refused its
	// entries to anyone but root.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := root.Chmod(d.Name, modeOf(d)); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name, err)
		}
		if err := root.Chtimes(d.Name, d.ModTime, d.ModTime); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name, err)
		}
	}
	return m, nil
}

// memberPath is a member's path relative to the volumes: clean, relative,
// inside a listed volume, whose own directory is the volume's first
// member.
func memberPath(hdr *tar.Header, listed map[string]bool) (string, error) {
	rel, ok := strings.CutPrefix(hdr.Name, VolumesDir+"/")
	if hdr.Typeflag == tar.TypeDir {
		rel = strings.TrimSuffix(rel, "/")
	}
	if !ok || rel == "" || path.Clean(rel) != rel || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, "../") || rel == ".." {
		return "", fmt.Errorf("the archive holds %q, which is no path inside %s/", hdr.Name, VolumesDir)
	}
	vol, _, _ := strings.Cut(rel, "/")
	if !listed[vol] {
		return "", fmt.Errorf("the archive holds %q, inside no volume its manifest lists", hdr.Name)
	}
	if rel == vol && hdr.Typeflag != tar.TypeDir {
		return "", fmt.Errorf("the archive's volume %s is not a directory", vol)
	}
	return rel, nil
}

// extractMember writes one member at name in root. Nothing existing is
// replaced, and no path runs through a link: root refuses what would
// leave it, and each parent must be a directory the archive made.
func extractMember(root *os.Root, r io.Reader, hdr *tar.Header, name string, owners bool) error {
	if parent := path.Dir(name); parent != "." {
		fi, err := root.Lstat(parent)
		if err != nil {
			return fmt.Errorf("its directory is not in the archive before it: %w", err)
		}
		if !fi.IsDir() {
			return errors.New("its directory is not a directory in the archive")
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil {
			return err
		}
	case tar.TypeReg:
		if hdr.Size < 0 {
			return errors.New("a negative size")
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, r, hdr.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return errors.New("a link to nothing")
		}
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		if owners {
			return root.Lchown(name, hdr.Uid, hdr.Gid)
		}
		return nil
	default:
		return fmt.Errorf("type %q: a volume backup holds directories, regular files and symbolic links only", hdr.Typeflag)
	}
	if owners {
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil // a directory's mode and time come last
	}
	if err := root.Chmod(name, modeOf(hdr)); err != nil {
		return err
	}
	return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
}

// modeOf is a member's permission bits and sticky bit; set-user-ID and
// set-group-ID are never restored (the area is mounted nosuid anyway).
func modeOf(hdr *tar.Header) fs.FileMode {
	mode := fs.FileMode(hdr.Mode & 0o777) //nolint:gosec // masked to permission bits
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// VolumesSummary writes a manifest's volumes for a person.
func (m *VolumesManifest) VolumesSummary() string {
	if len(m.Volumes) == 0 {
		return "no volumes"
	}
	var b bytes.Buffer
	var bytesAll int64
	for _, v := range m.Volumes {
		bytesAll += v.Bytes
	}
	fmt.Fprintf(&b, "%d volumes, %d bytes:", len(m.Volumes), bytesAll)
	for _, v := range m.Volumes {
		fmt.Fprintf(&b, " %s (%d files, %d bytes)", v.Name, v.Files, v.Bytes)
	}
	return b.String()
}
