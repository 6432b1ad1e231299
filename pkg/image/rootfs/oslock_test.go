package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// buildDeb makes a small .deb of pkg at version and returns its path and
// sha256.
func buildDeb(t *testing.T, pkg, version string) (string, string) {
	t.Helper()
	requireTool(t, "dpkg-deb")
	root := filepath.Join(t.TempDir(), pkg)
	writeFiles(t, root, map[string]string{
		"DEBIAN/control":          "Package: " + pkg + "\nVersion: " + version + "\nArchitecture: amd64\nMaintainer: t <t@example.org>\nPriority: required\nDescription: test\n",
		"usr/share/" + pkg + "/x": pkg,
	})
	deb := filepath.Join(t.TempDir(), pkg+"_"+version+"_amd64.deb")
	out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb).CombinedOutput()
	require.NoError(t, err, "dpkg-deb --build: %s", out)
	b, err := os.ReadFile(deb)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return deb, hex.EncodeToString(sum[:])
}

// archive serves files (path under the mirror -> host file) as a Debian
// mirror does, and counts what it served.
func archive(t *testing.T, files map[string]string) (string, *int) {
	t.Helper()
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src, ok := files[strings.TrimPrefix(r.URL.Path, "/debian/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		served++
		http.ServeFile(w, r, src)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/debian", &served
}

func testLock(t *testing.T) (*OSLock, map[string]string) {
	t.Helper()
	files := map[string]string{}
	l := &OSLock{APIVersion: spec.APIVersion, Kind: OSLockKind, Suite: "trixie", Mirror: "http://deb.debian.org/debian", Packages: []string{"base-files", "systemd"}}
	for _, p := range []struct{ name, version string }{{"base-files", "13.8"}, {"systemd", "1:257.9-1"}} {
		deb, sum := buildDeb(t, p.name, p.version)
		file := fmt.Sprintf("pool/main/%c/%s/%s", p.name[0], p.name, filepath.Base(deb))
		files[file] = deb
		l.Lock = append(l.Lock, bundle.DebianPackage{Package: p.name, Version: p.version, File: file, SHA256: sum})
	}
	return l, files
}

func TestOSLockRoundTrip(t *testing.T) {
	l, _ := testLock(t)
	l.Mirror = "http://deb.debian.org/debian"
	path := filepath.Join(t.TempDir(), "terrarium.lock.yaml")
	require.NoError(t, WriteOSLock(path, l))
	got, err := ReadOSLock(path)
	require.NoError(t, err)
	assert.Equal(t, l, got)

	assert.NoError(t, got.Matches(spec.OS{Suite: "trixie", Packages: []string{"systemd", "base-files"}}), "any order")
	err = got.Matches(spec.OS{Suite: "trixie", Packages: []string{"systemd", "base-files", "sudo"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write it again with `make pin`")
	assert.Error(t, got.Matches(spec.OS{Suite: "forky", Packages: []string{"systemd", "base-files"}}))
}

func TestReadOSLockErrors(t *testing.T) {
	good := func() *OSLock { l, _ := testLock(t); return l }
	for name, tc := range map[string]struct {
		mutate func(*OSLock)
		want   string
	}{
		"a bad sha256":          {func(l *OSLock) { l.Lock[0].SHA256 = "abc" }, `$.lock[0].sha256: "abc" is not a sha256`},
		"a path out of pool":    {func(l *OSLock) { l.Lock[1].File = "pool/../../etc/passwd.deb" }, "$.lock[1]: needs a package, a version and a file under pool/"},
		"no files":              {func(l *OSLock) { l.Lock = nil }, "$.lock: lists no .deb file"},
		"another kind":          {func(l *OSLock) { l.Kind = "Bundle" }, "$.kind: is terrarium.dev/v1alpha1 Bundle"},
		"a mirror with a quote": {func(l *OSLock) { l.Mirror = "http://x/'; rm -rf /" }, "$.mirror:"},
		"a bad suite":           {func(l *OSLock) { l.Suite = "trixie main" }, "$.suite:"},
	} {
		t.Run(name, func(t *testing.T) {
			l := good()
			tc.mutate(l)
			path := filepath.Join(t.TempDir(), "x.lock.yaml")
			require.NoError(t, WriteOSLock(path, l))
			_, err := ReadOSLock(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestLocalRepo: the lock's files come from the mirror once, checked by
// their sha256, into a flat repository whose Packages index holds each
// file's own control data and whose Release names the index's hash.
func TestLocalRepo(t *testing.T) {
	l, files := testLock(t)
	mirror, served := archive(t, files)
	l.Mirror = mirror
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)

	dir := t.TempDir()
	line, err := localRepo(context.Background(), c, l, dir, epoch)
	require.NoError(t, err)
	assert.Equal(t, "deb [trusted=yes] copy://"+dir+" ./", line)
	index, err := os.ReadFile(filepath.Join(dir, "Packages"))
	require.NoError(t, err)
	stanzas := strings.Split(strings.TrimSpace(string(index)), "\n\n")
	require.Len(t, stanzas, 2)
	for i, e := range l.Lock {
		assert.Contains(t, stanzas[i], "Package: "+e.Package+"\n")
		assert.Contains(t, stanzas[i], "Version: "+e.Version+"\n")
		assert.Contains(t, stanzas[i], "Priority: required\n", "the control data as the package has it")
		assert.Contains(t, stanzas[i], "Filename: ./"+filepath.Base(e.File)+"\n")
		assert.Contains(t, stanzas[i], "SHA256: "+e.SHA256)
		assert.FileExists(t, filepath.Join(dir, filepath.Base(e.File)))
	}
	release, err := os.ReadFile(filepath.Join(dir, "Release"))
	require.NoError(t, err)
	sum := sha256.Sum256(index)
	assert.Contains(t, string(release), fmt.Sprintf(" %x %d Packages\n", sum, len(index)))
	assert.Contains(t, string(release), "Date: Thu, 01 Jan 2026 00:00:00 UTC\n")
	assert.Equal(t, 2, *served)

	// Again: from the cache, nothing fetched.
	_, err = localRepo(context.Background(), c, l, t.TempDir(), epoch)
	require.NoError(t, err)
	assert.Equal(t, 2, *served)

	// A mirror that serves other bytes under a locked name: refused.
	other, _ := buildDeb(t, "systemd", "1:258-1")
	files[l.Lock[1].File] = other
	c2, err := cache.New(t.TempDir())
	require.NoError(t, err)
	_, err = localRepo(context.Background(), c2, l, t.TempDir(), epoch)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "os.lock[1] systemd")
	assert.Contains(t, err.Error(), "the lock says "+l.Lock[1].SHA256)
}

// TestBaseKeyWithLock: with a lock, the base is its files, wherever they
// are fetched from; without, the mirror of the day.
func TestBaseKeyWithLock(t *testing.T) {
	l, _ := testLock(t)
	o := spec.OS{Suite: "trixie", Mirror: "http://deb.debian.org/debian", Packages: []string{"systemd", "base-files"}}
	key := func(o spec.OS, l *OSLock) string {
		k, err := BaseKey(o, l, epoch)
		require.NoError(t, err)
		return k
	}
	locked := key(o, l)
	assert.NotEqual(t, key(o, nil), locked)
	other := o
	other.Mirror = "http://mirror.example/debian"
	assert.Equal(t, locked, key(other, l), "a locked base does not depend on the mirror")
	assert.NotEqual(t, key(o, nil), key(other, nil), "an unlocked base does")
	changed := *l
	changed.Lock = append([]bundle.DebianPackage(nil), l.Lock...)
	changed.Lock[0].SHA256 = strings.Repeat("0", 64)
	assert.NotEqual(t, locked, key(o, &changed), "another file, another base")

	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	o.Packages = append(o.Packages, "sudo")
	_, err = BuildBase(context.Background(), c, o, l, epoch, discard)
	require.Error(t, err, "a lock for other packages is refused before anything runs")
	assert.Contains(t, err.Error(), "make pin")
}

func TestCheckInstalled(t *testing.T) {
	l, _ := testLock(t)
	assert.NoError(t, l.checkInstalled(map[string]string{"base-files": "13.8", "systemd": "1:257.9-1"}))
	err := l.checkInstalled(map[string]string{"base-files": "13.9", "sudo": "1.9", "libc6": "2.41"})
	require.Error(t, err)
	for _, want := range []string{
		"base-files is installed at 13.9, locked at 13.8",
		"systemd 1:257.9-1 is locked but not installed",
		"libc6 2.41 is installed but not locked",
		"sudo 1.9 is installed but not locked",
		"make pin",
	} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Equal(t, []string{"base-files", "systemd"}, l.packageNames())
}
