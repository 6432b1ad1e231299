package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testVolumesManifest() VolumesManifest {
	return VolumesManifest{
		Cluster:    "plant-7",
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
		Node:       "w-1",
		TakenAt:    time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC),
		Release:    "0.1.0",
	}
}

// testArea is a volume area with two volumes, a link inside one, what a
// backup skips, and what is not a volume.
func testArea(t *testing.T) string {
	t.Helper()
	area := t.TempDir()
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	must := func(err error) { t.Helper(); require.NoError(t, err) }
	a := filepath.Join(area, "pvc-aaa_default_data-db-0")
	must(os.MkdirAll(filepath.Join(a, "sub", "deeper"), 0o755))
	must(os.WriteFile(filepath.Join(a, "token"), []byte("token-1\n"), 0o640))
	must(os.WriteFile(filepath.Join(a, "sub", "deeper", "big"), bytes.Repeat([]byte("x"), 200<<10), 0o600))
	must(os.Symlink("../token", filepath.Join(a, "sub", "link")))
	must(os.Symlink("/etc/passwd", filepath.Join(a, "outside")))
	must(os.Mkdir(filepath.Join(a, "shared"), 0o755))
	must(os.Chmod(filepath.Join(a, "shared"), 0o777|fs.ModeSticky))
	must(os.Chtimes(filepath.Join(a, "token"), old, old))
	must(os.Chtimes(filepath.Join(a, "sub"), old, old))
	b := filepath.Join(area, "pvc-bbb_plant_logs-0")
	must(os.Mkdir(b, 0o750))
	must(os.WriteFile(filepath.Join(b, "empty"), nil, 0o644))
	// Not volumes: the marker, ext4's lost+found, a hidden directory.
	must(os.WriteFile(filepath.Join(area, ".terrarium-volume-area"), []byte("marker"), 0o644))
	must(os.Mkdir(filepath.Join(area, "lost+found"), 0o700))
	must(os.Mkdir(filepath.Join(area, ".restore"), 0o700))
	return area
}

func writeVolumesBackup(t *testing.T, pass, area string) ([]byte, VolumesWritten) {
	t.Helper()
	scan, err := ScanVolumes(area)
	require.NoError(t, err)
	var buf bytes.Buffer
	res, err := WriteVolumes(context.Background(), &buf, pass, testVolumesManifest(), area, scan)
	require.NoError(t, err)
	assert.LessOrEqual(t, int64(buf.Len()), scan.ArchiveBytes, "the scan bounds the archive")
	return buf.Bytes(), res
}

func TestVolumesRoundTrip(t *testing.T) {
	pass, err := VolumesPassphrase(ecKeyPEM(t), "plant-7", "w-1")
	require.NoError(t, err)
	area := testArea(t)
	scan, err := ScanVolumes(area)
	require.NoError(t, err)
	assert.Equal(t, []Volume{
		{Name: "pvc-aaa_default_data-db-0", Files: 2, Bytes: 8 + 200<<10},
		{Name: "pvc-bbb_plant_logs-0", Files: 1, Bytes: 0},
	}, scan.Volumes)

	b, res := writeVolumesBackup(t, pass, area)
	assert.Equal(t, VolumesWritten{Files: 3, Bytes: 8 + 200<<10}, res)

	out := filepath.Join(t.TempDir(), "restored")
	m, err := ExtractVolumes(bytes.NewReader(b), pass, out, false)
	require.NoError(t, err)
	assert.Equal(t, "w-1", m.Node)
	assert.Equal(t, scan.Volumes, m.Volumes)
	assert.Contains(t, m.VolumesSummary(), "2 volumes, 204808 bytes")

	// Every volume, entry for entry, with its mode, link target and time;
	// nothing else.
	entries := func(root string) map[string]string {
		got := map[string]string{}
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			rel, _ := filepath.Rel(root, p)
			fi, err := os.Lstat(p)
			require.NoError(t, err)
			desc := fi.Mode().String()
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				desc += " -> " + l
			case fi.Mode().IsRegular():
				c, _ := os.ReadFile(p)
				desc += " " + string(c[:min(len(c), 16)]) + " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
			case rel == "pvc-aaa_default_data-db-0/sub":
				desc += " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
			}
			got[rel] = desc
			return nil
		}))
		return got
	}
	want := entries(area)
	for _, notVolume := range []string{".", ".terrarium-volume-area", "lost+found", ".restore"} {
		delete(want, notVolume)
	}
	got := entries(out)
	delete(got, ".")
	assert.Equal(t, want, got)
	assert.Equal(t, "dtrwxrwxrwx", got["pvc-aaa_default_data-db-0/shared"], "the sticky bit is kept")
	assert.Contains(t, got["pvc-aaa_default_data-db-0/token"], "2026-01-02T03:04:05Z", "the time is kept")

	// Another node's passphrase (or another cluster's) opens nothing.
	otherNode, err := VolumesPassphrase(ecKeyPEM(t), "plant-7", "w-2")
	require.NoError(t, err)
	_, err = ExtractVolumes(bytes.NewReader(b), otherNode, t.TempDir(), false)
	require.ErrorIs(t, err, ErrNotThisNode)
}

func TestVolumesPassphrase(t *testing.T) {
	ca := ecKeyPEM(t)
	w1, err := VolumesPassphrase(ca, "plant-7", "w-1")
	require.NoError(t, err)
	again, err := VolumesPassphrase(ca, "plant-7", "w-1")
	require.NoError(t, err)
	w2, err := VolumesPassphrase(ca, "plant-7", "w-2")
	require.NoError(t, err)
	etcd, err := Passphrase(ca, "plant-7")
	require.NoError(t, err)
	assert.Equal(t, w1, again)
	assert.NotEqual(t, w1, w2, "each node has its own")
	assert.NotEqual(t, strings.TrimPrefix(w1, VolumesPassphrasePrefix), strings.TrimPrefix(etcd, PassphrasePrefix), "not the etcd backup's")
	assert.True(t, IsVolumesPassphrase(w1))
	for _, bad := range []string{"", etcd, VolumesPassphrasePrefix + "short", w1 + "A", strings.Replace(w1, VolumesPassphrasePrefix, "", 1)} {
		assert.False(t, IsVolumesPassphrase(bad), bad)
	}
}

func TestVolumesFileNames(t *testing.T) {
	at := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	name := VolumesFileName("plant-7", "w-1", at)
	assert.Equal(t, "terrarium-volumes-plant-7-w-1-20261203T050000Z.age", name)
	node, got, ok := ParseVolumesFileName(name, "plant-7")
	require.True(t, ok)
	assert.Equal(t, "w-1", node)
	assert.Equal(t, at, got)
	for _, bad := range []string{"terrarium-volumes-plant-7-20261203T050000Z.age", "terrarium-volumes-plant-8-w-1-20261203T050000Z.age",
		"terrarium-backup-plant-7-w-1-20261203T050000Z.age", "dir/" + name, "terrarium-volumes-plant-7-w-1-2026.age"} {
		_, _, ok := ParseVolumesFileName(bad, "plant-7")
		assert.False(t, ok, bad)
	}
	names := []string{
		VolumesFileName("plant-7", "w-1", at.Add(-time.Hour)),
		VolumesFileName("plant-7", "w-1", at),
		VolumesFileName("plant-7", "w-10", at.Add(time.Hour)),
		VolumesFileName("plant-7", "cp-1", at.Add(time.Hour)),
		FileName("plant-7", "w-1", at.Add(time.Hour)),
	}
	best, ok := NewestVolumes(names, "plant-7", "w-1")
	require.True(t, ok)
	assert.Equal(t, name, best)
	_, ok = NewestVolumes(names, "plant-7", "w-2")
	assert.False(t, ok)
}

// volumesTar is a volume backup's archive of members after a manifest
// listing volumes.
func volumesTar(t testing.TB, volumes []string, members ...member) []byte {
	m := testVolumesManifest()
	m.APIVersion, m.Kind = APIVersion, VolumesKind
	m.Volumes = []Volume{}
	for _, v := range volumes {
		m.Volumes = append(m.Volumes, Volume{Name: v})
	}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	return tarOf(t, append([]member{{name: ManifestName, body: mb}}, members...)...)
}

func extractVolumesBytes(t testing.TB, b []byte) (*VolumesManifest, string, error) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	m, err := extractVolumesTar(bytes.NewReader(b), root, false)
	return m, dir, err
}

func TestExtractVolumesRefusesHostileArchives(t *testing.T) {
	const v = "pvc-a"
	dir := member{name: "volumes/" + v + "/", typeflag: tar.TypeDir}
	_, _, err := extractVolumesBytes(t, volumesTar(t, []string{v}, dir, member{name: "volumes/" + v + "/f", body: []byte("x")}))
	require.NoError(t, err, "a plain archive is accepted")

	tests := []struct {
		name    string
		members []member
		want    string
	}{
		{"outside volumes/", []member{dir, {name: "etc/passwd", body: []byte("x")}}, "no path inside volumes/"},
		{"up and out", []member{dir, {name: "volumes/" + v + "/../../x", body: []byte("x")}}, "no path inside volumes/"},
		{"absolute", []member{dir, {name: "volumes//etc/x", body: []byte("x")}}, "no path inside volumes/"},
		{"an unlisted volume", []member{dir, {name: "volumes/pvc-b/", typeflag: tar.TypeDir}}, "inside no volume"},
		{"a volume that is a file", []member{{name: "volumes/" + v, body: []byte("x")}}, "not a directory"},
		{"through a link", []member{dir, {name: "volumes/" + v + "/l", typeflag: tar.TypeSymlink, link: "/etc"}, {name: "volumes/" + v + "/l/passwd", body: []byte("x")}}, "not a directory"},
		{"a parent not yet made", []member{dir, {name: "volumes/" + v + "/d/f", body: []byte("x")}}, "not in the archive before it"},
		{"a hard link", []member{dir, {name: "volumes/" + v + "/h", typeflag: tar.TypeLink, link: "volumes/" + v + "/f"}}, "regular files and symbolic links only"},
		{"a device", []member{dir, {name: "volumes/" + v + "/d", typeflag: tar.TypeChar}}, "regular files and symbolic links only"},
		{"a member twice", []member{dir, {name: "volumes/" + v + "/f", body: []byte("x")}, {name: "volumes/" + v + "/f", body: []byte("y")}}, "exists"},
		{"a listed volume missing", nil, "lacks the volumes [pvc-a]"},
		{"not the manifest first", []member{dir}, "begins with"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := volumesTar(t, []string{v}, tt.members...)
			if tt.name == "not the manifest first" {
				b = tarOf(t, tt.members...)
			}
			_, out, err := extractVolumesBytes(t, b)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			_, statErr := os.Lstat(filepath.Join(filepath.Dir(out), "passwd"))
			assert.ErrorIs(t, statErr, fs.ErrNotExist, "nothing written outside")
		})
	}
}

func TestParseVolumesManifestErrors(t *testing.T) {
	good := testVolumesManifest()
	good.APIVersion, good.Kind = APIVersion, VolumesKind
	good.Volumes = []Volume{{Name: "pvc-a"}}
	tests := []struct {
		name string
		edit func(m *VolumesManifest)
		want string
	}{
		{"an etcd backup's kind", func(m *VolumesManifest) { m.Kind = Kind }, "not a Terrarium volume backup"},
		{"a volume named ..", func(m *VolumesManifest) { m.Volumes[0].Name = ".." }, "not a volume's name"},
		{"a volume with a slash", func(m *VolumesManifest) { m.Volumes[0].Name = "a/b" }, "not a volume's name"},
		{"a volume twice", func(m *VolumesManifest) { m.Volumes = append(m.Volumes, m.Volumes[0]) }, "twice"},
		{"no node", func(m *VolumesManifest) { m.Node = "" }, "node"},
		{"no time", func(m *VolumesManifest) { m.TakenAt = time.Time{} }, "takenAt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := good
			m.Volumes = append([]Volume(nil), good.Volumes...)
			tt.edit(&m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			_, err = ParseVolumesManifest(b)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// FuzzExtractVolumesTar feeds arbitrary archives (what a stick's volume
// backup decrypts to) to the extractor: it returns an error or a
// manifest, never panics, writes only inside its directory, and what it
// accepts holds every volume the manifest lists as a directory.
func FuzzExtractVolumesTar(f *testing.F) {
	f.Add(volumesTar(f, []string{"pvc-a"}, member{name: "volumes/pvc-a/", typeflag: tar.TypeDir}, member{name: "volumes/pvc-a/f", body: []byte("x")},
		member{name: "volumes/pvc-a/l", typeflag: tar.TypeSymlink, link: "f"}))
	f.Add(volumesTar(f, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "area")
		require.NoError(t, os.Mkdir(dir, 0o700))
		root, err := os.OpenRoot(dir)
		require.NoError(t, err)
		defer root.Close()
		m, err := extractVolumesTar(bytes.NewReader(b), root, false)
		if entries, _ := os.ReadDir(parent); len(entries) != 1 {
			t.Fatalf("wrote beside its directory: %v", entries)
		}
		if err != nil {
			return
		}
		for _, v := range m.Volumes {
			fi, err := root.Lstat(v.Name)
			if err != nil || !fi.IsDir() {
				t.Fatalf("accepted an archive without the directory of volume %s: %v", v.Name, err)
			}
		}
	})
}
