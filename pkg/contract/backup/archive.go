package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	"filippo.io/age"
)

// maxWorkFactor is the highest scrypt cost a backup's header may ask of
// its reader: a hostile file cannot make a node spend minutes on it.
const maxWorkFactor = 16

// ErrNotThisCluster says a backup does not decrypt under the passphrase:
// it is another cluster's, or not a backup.
var ErrNotThisCluster = errors.New("the backup does not decrypt with this cluster's backup passphrase: it is another cluster's backup (another CA), or not a Terrarium backup")

// Write writes a backup to w: m (whose Snapshot and PKI it fills in), the
// snapshot file at snapshotPath and the PKI files by their names in
// PKIFiles, encrypted to passphrase.
func Write(w io.Writer, passphrase string, m Manifest, snapshotPath string, pki map[string][]byte) error {
	m.APIVersion, m.Kind = APIVersion, Kind
	m.TakenAt = m.TakenAt.UTC()
	m.PKI = map[string]File{}
	for _, name := range PKIFiles {
		b, ok := pki[name]
		if !ok {
			return fmt.Errorf("writing a backup: the PKI file %s is missing", name)
		}
		m.PKI[name] = fileOf(b)
	}
	snap, err := os.Open(snapshotPath)
	if err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	defer snap.Close()
	h := sha256.New()
	n, err := io.Copy(h, snap)
	if err != nil {
		return fmt.Errorf("writing a backup: reading %s: %w", snapshotPath, err)
	}
	m.Snapshot = File{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if err := m.check(); err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if _, err := snap.Seek(0, io.SeekStart); err != nil {
		return err
	}

	rcp, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	rcp.SetWorkFactor(scryptWorkFactor)
	enc, err := age.Encrypt(w, rcp)
	if err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	tw := tar.NewWriter(enc)
	add := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o600, Size: size, Typeflag: tar.TypeReg, ModTime: m.TakenAt, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		got, err := io.Copy(tw, r)
		if err == nil && got != size {
			err = fmt.Errorf("%s changed while it was written (%d bytes, then %d)", name, size, got)
		}
		return err
	}
	if err := add(ManifestName, int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	if err := add(SnapshotName, n, snap); err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	for _, name := range PKIFiles {
		if err := add(path.Join(PKIDir, name), int64(len(pki[name])), bytes.NewReader(pki[name])); err != nil {
			return fmt.Errorf("writing a backup: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("writing a backup: %w", err)
	}
	return nil
}

func fileOf(b []byte) File {
	sum := sha256.Sum256(b)
	return File{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// Extract decrypts the backup r with passphrase and writes its members
// into dir (created; it must not exist yet, or be empty): snapshot.db and
// pki/..., each checked against the manifest it returns. A member that is
// not the manifest's, too large, of the wrong digest, a link or a
// duplicate stops it with an error naming the member; what was written is
// left for the caller to remove with dir.
func Extract(r io.Reader, passphrase, dir string) (*Manifest, error) {
	var m *Manifest
	err := decryptInto(r, passphrase, dir, ErrNotThisCluster, func(dec io.Reader, root *os.Root) error {
		var err error
		m, err = extractTar(dec, root)
		return err
	})
	return m, err
}

// decryptInto decrypts the age file r with passphrase and hands what it
// holds to extract with dir (created) opened as an os.Root; notOurs is the
// error for a file the passphrase does not open. After extract it reads
// to the end: tar stops at its end marker, and when that ends a full
// 64 KiB chunk, age checks that nothing follows the file only on a
// further read, so a file with bytes after it is refused.
func decryptInto(r io.Reader, passphrase, dir string, notOurs error, extract func(dec io.Reader, root *os.Root) error) error {
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return err
	}
	id.SetMaxWorkFactor(maxWorkFactor)
	dec, err := age.Decrypt(bufio.NewReader(r), id)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return notOurs
		}
		return fmt.Errorf("not a readable age file: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := extract(dec, root); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, dec); err != nil {
		return fmt.Errorf("after the archive: %w", err)
	}
	return nil
}

// readManifest reads the manifest, which every backup's archive begins
// with, of at most limit bytes.
func readManifest(tr *tar.Reader, limit int64) ([]byte, error) {
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("the archive: %w", orEOF(err))
	}
	if hdr.Name != ManifestName || hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("the archive begins with %q, not %s", hdr.Name, ManifestName)
	}
	if hdr.Size > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", ManifestName, hdr.Size, limit)
	}
	mb, err := io.ReadAll(io.LimitReader(tr, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestName, err)
	}
	return mb, nil
}

// extractTar reads a backup's tar from r into root.
func extractTar(r io.Reader, root *os.Root) (*Manifest, error) {
	tr := tar.NewReader(r)
	mb, err := readManifest(tr, MaxSmallFile)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return nil, err
	}
	want := map[string]File{SnapshotName: m.Snapshot}
	for name, f := range m.PKI {
		want[path.Join(PKIDir, name)] = f
	}
	if err := root.Mkdir(PKIDir, 0o700); err != nil {
		return nil, err
	}
	if err := root.Mkdir(path.Join(PKIDir, "etcd"), 0o700); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the archive: %w", err)
		}
		f, ok := want[hdr.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("the archive holds %q, which no backup carries", hdr.Name)
		case seen[hdr.Name]:
			return nil, fmt.Errorf("the archive holds %s twice", hdr.Name)
		case hdr.Typeflag != tar.TypeReg:
			return nil, fmt.Errorf("%s is not a regular file in the archive", hdr.Name)
		case hdr.Size != f.Size:
			return nil, fmt.Errorf("%s: %d bytes, the manifest says %d", hdr.Name, hdr.Size, f.Size)
		}
		seen[hdr.Name] = true
		if err := copyChecked(root, hdr.Name, tr, f); err != nil {
			return nil, fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
	if missing := absent(want, seen); len(missing) > 0 {
		return nil, fmt.Errorf("the archive lacks %v", missing)
	}
	return m, nil
}

func copyChecked(root *os.Root, name string, r io.Reader, f File) error {
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(r, f.Size))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("%d bytes, the manifest says %d", n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("sha256 %s, the manifest says %s: the backup is damaged", got, f.SHA256)
	}
	return nil
}

// absent are the keys of want that seen lacks, sorted: the members a
// manifest lists and an archive did not hold.
func absent[V any](want map[string]V, seen map[string]bool) []string {
	var missing []string
	for name := range want {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

func orEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("empty")
	}
	return err
}

// Newest picks the newest backup among names (base names of one
// directory) by the time in its name; ok is false when none is a backup.
func Newest(names []string) (string, bool) {
	best, bestT := "", time.Time{}
	for _, n := range names {
		if !IsBackupName(n) {
			continue
		}
		stem := n[:len(n)-len(Suffix)]
		if len(stem) < len(timeInName) {
			continue
		}
		t, err := time.Parse(timeInName, stem[len(stem)-len(timeInName):])
		if err != nil {
			continue
		}
		if best == "" || t.After(bestT) || (t.Equal(bestT) && n > best) {
			best, bestT = n, t
		}
	}
	return best, best != ""
}
