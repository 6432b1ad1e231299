package backup

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ecKeyPEM(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func testPKI() map[string][]byte {
	m := map[string][]byte{}
	for _, f := range PKIFiles {
		m[f] = []byte("content of " + f + "\n")
	}
	return m
}

func testManifest() Manifest {
	return Manifest{
		Cluster:    "plant-7",
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
		Node:       "cp-1",
		TakenAt:    time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC),
		Release:    "0.1.0",
		Kubernetes: "v1.36.3",
	}
}

// writeTestBackup writes a backup of a snapshot with the given content.
func writeTestBackup(t *testing.T, pass string, snapshot []byte) []byte {
	t.Helper()
	snap := filepath.Join(t.TempDir(), "snap.db")
	require.NoError(t, os.WriteFile(snap, snapshot, 0o600))
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, pass, testManifest(), snap, testPKI()))
	return buf.Bytes()
}

func TestPassphrase(t *testing.T) {
	ca := ecKeyPEM(t)
	a, err := Passphrase(ca, "plant-7")
	require.NoError(t, err)
	again, err := Passphrase(ca, "plant-7")
	require.NoError(t, err)
	other, err := Passphrase(ca, "plant-8")
	require.NoError(t, err)
	otherKey, err := Passphrase(ecKeyPEM(t), "plant-7")
	require.NoError(t, err)

	assert.True(t, strings.HasPrefix(a, PassphrasePrefix))
	assert.Len(t, strings.TrimPrefix(a, PassphrasePrefix), 43, "32 bytes, base64url without padding")
	assert.Equal(t, a, again, "the same secrets give the same passphrase")
	assert.NotEqual(t, a, other, "the cluster name is bound in")
	assert.NotEqual(t, a, otherKey, "the CA key is the secret")

	// kubeadm writes an RSA CA key as PKCS #1, a secrets file may hold
	// PKCS #8: one key, one passphrase.
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})
	der, err := x509.MarshalPKCS8PrivateKey(rk)
	require.NoError(t, err)
	pkcs8 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	p1, err := Passphrase(pkcs1, "c")
	require.NoError(t, err)
	p8, err := Passphrase(pkcs8, "c")
	require.NoError(t, err)
	assert.Equal(t, p1, p8)

	_, err = Passphrase([]byte("not pem"), "c")
	assert.ErrorContains(t, err, "cluster CA key")
	_, err = Passphrase(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "c")
	assert.ErrorContains(t, err, "not a private key")
}

func TestRoundTrip(t *testing.T) {
	pass, err := Passphrase(ecKeyPEM(t), "plant-7")
	require.NoError(t, err)
	snapshot := bytes.Repeat([]byte("etcd snapshot "), 10000)
	b := writeTestBackup(t, pass, snapshot)
	assert.False(t, bytes.Contains(b, []byte("etcd snapshot")), "the snapshot is encrypted")
	assert.False(t, bytes.Contains(b, []byte("content of ca.key")), "the keys are encrypted")

	dir := filepath.Join(t.TempDir(), "out")
	m, err := Extract(bytes.NewReader(b), pass, dir)
	require.NoError(t, err)
	assert.Equal(t, "plant-7", m.Cluster)
	assert.Equal(t, "cp-1", m.Node)
	assert.Equal(t, int64(len(snapshot)), m.Snapshot.Size)
	got, err := os.ReadFile(filepath.Join(dir, SnapshotName))
	require.NoError(t, err)
	assert.Equal(t, snapshot, got)
	for name, want := range testPKI() {
		got, err := os.ReadFile(filepath.Join(dir, PKIDir, name))
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
}

func TestExtractOtherCluster(t *testing.T) {
	pass, err := Passphrase(ecKeyPEM(t), "plant-7")
	require.NoError(t, err)
	b := writeTestBackup(t, pass, []byte("snap"))
	other, err := Passphrase(ecKeyPEM(t), "plant-7")
	require.NoError(t, err)
	_, err = Extract(bytes.NewReader(b), other, filepath.Join(t.TempDir(), "out"))
	assert.ErrorIs(t, err, ErrNotThisCluster)

	_, err = Extract(strings.NewReader("hello, not age"), pass, filepath.Join(t.TempDir(), "out"))
	assert.ErrorContains(t, err, "not a readable age file")
}

func TestWriteRefusesIncomplete(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "snap.db")
	require.NoError(t, os.WriteFile(snap, []byte("s"), 0o600))
	pki := testPKI()
	delete(pki, "sa.key")
	err := Write(&bytes.Buffer{}, "p", testManifest(), snap, pki)
	assert.ErrorContains(t, err, "sa.key is missing")

	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	err = Write(&bytes.Buffer{}, "p", testManifest(), empty, testPKI())
	assert.ErrorContains(t, err, "snapshot: size 0")
}

// member is one tar entry of a hand-made archive.
type member struct {
	name     string
	typeflag byte
	body     []byte
	link     string
}

func tarOf(t testing.TB, members ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		tf := m.typeflag
		if tf == 0 {
			tf = tar.TypeReg
		}
		hdr := &tar.Header{Name: m.name, Typeflag: tf, Mode: 0o600, Size: int64(len(m.body)), Linkname: m.link}
		if tf != tar.TypeReg {
			hdr.Size = 0
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if tf == tar.TypeReg {
			_, err := tw.Write(m.body)
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// goodMembers are a valid archive's members, the manifest first.
func goodMembers(t testing.TB) []member {
	m := testManifest()
	m.APIVersion, m.Kind = APIVersion, Kind
	snap := []byte("snapshot")
	m.Snapshot = fileOf(snap)
	m.PKI = map[string]File{}
	out := []member{{}, {name: SnapshotName, body: snap}}
	for _, name := range PKIFiles {
		b := []byte("pki " + name)
		m.PKI[name] = fileOf(b)
		out = append(out, member{name: PKIDir + "/" + name, body: b})
	}
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	out[0] = member{name: ManifestName, body: mb}
	return out
}

func extractBytes(t testing.TB, b []byte) (*Manifest, error) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	return extractTar(bytes.NewReader(b), root)
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	good := goodMembers(t)
	_, err := extractBytes(t, tarOf(t, good...))
	require.NoError(t, err, "the unaltered archive is accepted")

	with := func(edit func(ms []member) []member) []member {
		ms := append([]member(nil), good...)
		return edit(ms)
	}
	tests := []struct {
		name    string
		members []member
		want    string
	}{
		{"manifest not first", with(func(ms []member) []member { ms[0], ms[1] = ms[1], ms[0]; return ms }), "begins with"},
		{"a symlink out of the archive", with(func(ms []member) []member {
			ms[1] = member{name: SnapshotName, typeflag: tar.TypeSymlink, link: "/dev/zero"}
			return ms
		}), "not a regular file"},
		{"a path out of the directory", with(func(ms []member) []member {
			return append(ms, member{name: "../../etc/passwd", body: []byte("x")})
		}), "which no backup carries"},
		{"a member twice", with(func(ms []member) []member { return append(ms, ms[1]) }), "twice"},
		{"a member missing", with(func(ms []member) []member { return ms[:len(ms)-1] }), "lacks"},
		{"a damaged snapshot", with(func(ms []member) []member {
			ms[1] = member{name: SnapshotName, body: []byte("snapshoT")}
			return ms
		}), "damaged"},
		{"a snapshot of another size", with(func(ms []member) []member {
			ms[1] = member{name: SnapshotName, body: []byte("snap")}
			return ms
		}), "the manifest says"},
		{"a huge manifest", []member{{name: ManifestName, body: bytes.Repeat([]byte(" "), MaxSmallFile+1)}}, "more than"},
		{"an empty archive", nil, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := extractBytes(t, tarOf(t, tt.members...))
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestParseManifestErrors(t *testing.T) {
	base := func() Manifest {
		ms := goodMembers(t)
		var m Manifest
		require.NoError(t, json.Unmarshal(ms[0].body, &m))
		return m
	}
	tests := []struct {
		name string
		edit func(*Manifest)
		want string
	}{
		{"kind", func(m *Manifest) { m.Kind = "Other" }, "not a Terrarium cluster backup"},
		{"cluster", func(m *Manifest) { m.Cluster = "Bad Name" }, "cluster:"},
		{"ca hash", func(m *Manifest) { m.CACertHash = "md5:1" }, "caCertHash"},
		{"snapshot too large", func(m *Manifest) { m.Snapshot.Size = MaxSnapshot + 1 }, "snapshot: size"},
		{"pki missing", func(m *Manifest) { delete(m.PKI, "ca.key") }, "ca.key is missing"},
		{"pki extra", func(m *Manifest) { m.PKI["../x"] = m.PKI["ca.key"] }, "not a file a backup carries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.edit(&m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			_, err = ParseManifest(b)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestNamesAndNewest(t *testing.T) {
	at := time.Date(2026, 11, 26, 9, 5, 7, 0, time.FixedZone("x", 3600))
	name := FileName("Plant 7", "cp-1", at)
	assert.Equal(t, "terrarium-backup-plant-7-cp-1-20261126T080507Z.age", name)
	assert.True(t, IsBackupName(name))
	assert.False(t, IsBackupName("dir/"+name))

	older := FileName("plant-7", "cp-2", at.Add(-time.Hour))
	newer := FileName("plant-7", "cp-2", at.Add(time.Hour))
	got, ok := Newest([]string{older, "README.txt", newer, name, "terrarium-backup-x.age"})
	require.True(t, ok)
	assert.Equal(t, newer, got)
	_, ok = Newest([]string{"a.txt"})
	assert.False(t, ok)
}
