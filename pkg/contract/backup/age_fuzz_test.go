package backup

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/stretchr/testify/require"
)

// fuzzPassphrase is the passphrase FuzzExtract decrypts with. Nothing but
// backups of testManifest and testPKI, with fuzzSnapshot or a snapshot of
// 's' bytes (fullChunkBackup), is ever encrypted to it, so whatever
// Extract accepts under it must be one of those.
const fuzzPassphrase = PassphrasePrefix + "fuzz-0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"

// fuzzWorkFactor is the scrypt cost of FuzzExtract's backups: age's
// lowest. Write's (scryptWorkFactor) takes milliseconds under the fuzzer's
// instrumentation, most of every run; the work factor is not what is
// fuzzed.
const fuzzWorkFactor = 1

// scryptStanza finds the work factor of an age header's scrypt stanza.
var scryptStanza = regexp.MustCompile(`\n-> scrypt [^ \n]* ([0-9]+)\n`)

// fuzzSnapshot is the snapshot of the backups FuzzExtract starts from.
var fuzzSnapshot = []byte("an etcd snapshot, small enough to fuzz\n")

// fuzzBackup is the backup Write makes of snapshot, testManifest and
// testPKI, encrypted to pass again at fuzzWorkFactor: the same archive in
// the same age format, cheaper to decrypt.
func fuzzBackup(tb testing.TB, pass string, snapshot []byte) []byte {
	tb.Helper()
	snap := filepath.Join(tb.TempDir(), "snap.db")
	require.NoError(tb, os.WriteFile(snap, snapshot, 0o600))
	var written bytes.Buffer
	require.NoError(tb, Write(&written, pass, testManifest(), snap, testPKI()))

	archive := decrypt(tb, written.Bytes(), pass)
	r, err := age.NewScryptRecipient(pass)
	require.NoError(tb, err)
	r.SetWorkFactor(fuzzWorkFactor)
	var b bytes.Buffer
	w, err := age.Encrypt(&b, r)
	require.NoError(tb, err)
	_, err = w.Write(archive)
	require.NoError(tb, err)
	require.NoError(tb, w.Close())
	return b.Bytes()
}

// fullChunkBackup is a backup encrypted to pass whose archive fills age's
// first chunk (64 KiB) exactly, so its last chunk is a full one: age checks
// that nothing follows a full last chunk only when it is read past.
func fullChunkBackup(tb testing.TB, pass string) []byte {
	tb.Helper()
	const chunk = 64 << 10
	// The archive grows with the snapshot in 512-byte blocks; the
	// manifest, which holds the snapshot's size, may take a block more.
	size := 1
	for range 4 {
		b := fuzzBackup(tb, pass, bytes.Repeat([]byte("s"), size))
		n := len(decrypt(tb, b, pass))
		if n == chunk {
			return b
		}
		size += chunk - n
		require.Positive(tb, size, "the archive of a 1-byte snapshot is %d bytes, more than a chunk", n)
	}
	tb.Fatal("found no snapshot size that makes the archive 64 KiB")
	return nil
}

// decrypt is what the age file b decrypts to under pass.
func decrypt(tb testing.TB, b []byte, pass string) []byte {
	tb.Helper()
	id, err := age.NewScryptIdentity(pass)
	require.NoError(tb, err)
	r, err := age.Decrypt(bytes.NewReader(b), id)
	require.NoError(tb, err)
	out, err := io.ReadAll(r)
	require.NoError(tb, err)
	return out
}

// TestExtractRefusesDataAfterFullLastChunk: a backup whose archive ends
// exactly at the end of a full age chunk, with bytes after it, is refused
// (FuzzExtract's testdata/fuzz/FuzzExtract/data-after-full-last-chunk).
// tar stops reading at its end marker, so age's own check that nothing
// follows the last chunk ran only once Extract read on to the end.
func TestExtractRefusesDataAfterFullLastChunk(t *testing.T) {
	b := fullChunkBackup(t, fuzzPassphrase)
	_, err := Extract(bytes.NewReader(b), fuzzPassphrase, filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	_, err = Extract(bytes.NewReader(append(b, "garbage"...)), fuzzPassphrase, filepath.Join(t.TempDir(), "out"))
	require.ErrorContains(t, err, "trailing data")
}

// FuzzExtract feeds a TERRA-BACKUP stick's file, the age layer and all, to
// Extract. Whatever the bytes, it does not panic; a file whose header does
// not decrypt under the passphrase (ErrNotThisCluster, or not an age file)
// leaves nothing behind, not even the directory; and age authenticates
// what it accepts: only a backup made with the passphrase, whole — its
// manifest, snapshot and PKI exactly what was written, and the same file
// one byte shorter or longer refused.
func FuzzExtract(f *testing.F) {
	good := fuzzBackup(f, fuzzPassphrase, fuzzSnapshot)
	f.Add(good)
	f.Add(fuzzBackup(f, PassphrasePrefix+"another-cluster", fuzzSnapshot))
	f.Add(good[:len(good)-1])
	f.Add(append(bytes.Clone(good), 0))
	f.Add([]byte{})
	f.Add([]byte("age-encryption.org/v1\n"))
	// A work factor beyond maxWorkFactor is refused before scrypt runs.
	f.Add([]byte("age-encryption.org/v1\n-> scrypt " + strings.Repeat("A", 22) + " 30\n" +
		strings.Repeat("A", 43) + "\n--- " + strings.Repeat("A", 43) + "\n"))
	// An age file to a key, not a passphrase; and an armored one.
	id, err := age.GenerateX25519Identity()
	require.NoError(f, err)
	var toKey, armored bytes.Buffer
	w, err := age.Encrypt(&toKey, id.Recipient())
	require.NoError(f, err)
	_, err = w.Write([]byte("not a backup"))
	require.NoError(f, err)
	require.NoError(f, w.Close())
	f.Add(toKey.Bytes())
	aw := armor.NewWriter(&armored)
	_, err = aw.Write(good)
	require.NoError(f, err)
	require.NoError(f, aw.Close())
	f.Add(armored.Bytes())

	// Extract makes its directory only for a file whose header decrypts:
	// one directory name under a directory of the worker's, removed after
	// each run, spares most runs a directory made and removed.
	base := f.TempDir()
	out := func(t *testing.T, name string) string {
		dir := filepath.Join(base, name)
		t.Cleanup(func() { require.NoError(t, os.RemoveAll(dir)) })
		return dir
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if m := scryptStanza.FindSubmatch(b); m != nil {
			if n, err := strconv.Atoi(string(m[1])); err == nil && n > fuzzWorkFactor && n <= maxWorkFactor {
				// Allowed, but scrypt would spend up to a second of
				// the fuzzer's time to find the key wrong.
				t.Skip("a work factor above fuzzWorkFactor")
			}
		}
		dir := out(t, "out")
		m, err := Extract(bytes.NewReader(b), fuzzPassphrase, dir)
		if err != nil {
			if errors.Is(err, ErrNotThisCluster) || strings.HasPrefix(err.Error(), "not a readable age file") {
				if _, serr := os.Lstat(dir); !errors.Is(serr, os.ErrNotExist) {
					t.Fatalf("a file that does not decrypt (%v) left %s behind: %v", err, dir, serr)
				}
			}
			return
		}
		got, err := os.ReadFile(filepath.Join(dir, SnapshotName))
		require.NoError(t, err)
		if !bytes.Equal(got, fuzzSnapshot) && len(bytes.Trim(got, "s")) != 0 {
			t.Fatalf("accepted a backup whose snapshot no backup encrypted to the passphrase has: %q", got)
		}
		want := testManifest()
		want.APIVersion, want.Kind = APIVersion, Kind
		want.Snapshot = fileOf(got)
		want.PKI = map[string]File{}
		for name, body := range testPKI() {
			want.PKI[name] = fileOf(body)
		}
		require.Equal(t, want, *m, "an accepted backup has the manifest written")
		for name, body := range testPKI() {
			got, err := os.ReadFile(filepath.Join(dir, PKIDir, name))
			require.NoError(t, err)
			require.Equal(t, body, got, "an accepted backup has pki/%s as written", name)
		}
		for what, v := range map[string][]byte{
			"shorter": b[:len(b)-1],
			"longer":  append(bytes.Clone(b), 0),
		} {
			_, err := Extract(bytes.NewReader(v), fuzzPassphrase, out(t, what))
			require.Error(t, err, "Extract accepted the backup one byte %s", what)
		}
	})
}
