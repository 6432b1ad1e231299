package bundle

import (
	"archive/tar"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// makeDeb builds a real .deb with dpkg-deb from files (path → content; a
// path ending in "/" is a directory) and returns its path and sha256.
func makeDeb(t *testing.T, pkg, version string, files map[string]string) (string, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), pkg)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755))
	control := "Package: " + pkg + "\nVersion: " + version + "\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: test\n"
	require.NoError(t, os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644))
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			require.NoError(t, os.MkdirAll(full, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o755))
	}
	deb := filepath.Join(t.TempDir(), pkg+"_"+version+"_amd64.deb")
	out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb).CombinedOutput()
	require.NoError(t, err, "dpkg-deb --build: %s", out)
	sum, err := fileSHA256(deb)
	require.NoError(t, err)
	return deb, sum
}

// fakeArchive serves files under pool/ and counts the requests.
type fakeArchive struct {
	srv   *httptest.Server
	files map[string]string // pool path → local file
	hits  atomic.Int32
}

func newFakeArchive(t *testing.T) *fakeArchive {
	a := &fakeArchive{files: map[string]string{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.hits.Add(1)
		p, ok := a.files[strings.TrimPrefix(r.URL.Path, "/debian/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, p)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeArchive) mirror() string { return a.srv.URL + "/debian" }

func (a *fakeArchive) publish(pool, deb string) { a.files[pool] = deb }

func layerEntries(t *testing.T, c *cache.Cache, d DebianLayer) map[string]*tar.Header {
	t.Helper()
	l, err := debianLayerFromCache(context.Background(), c, d, time.Unix(1767225600, 0), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	rc, err := l.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out[h.Name] = h
	}
}

func TestLockedDebianLayer(t *testing.T) {
	tool, toolSum := makeDeb(t, "tool", "1:2.0-1", map[string]string{
		"bin/tool": "#!/bin/sh\n", "usr/lib/x86_64-linux-gnu/libtool.so.1": "elf", "usr/share/doc/tool/copyright": "c",
	})
	lib, libSum := makeDeb(t, "libdep", "1.0-1", map[string]string{"usr/lib/x86_64-linux-gnu/libdep.so.1": "elf"})
	a := newFakeArchive(t)
	a.publish("pool/main/t/tool/tool_2.0-1_amd64.deb", tool)
	a.publish("pool/main/libd/libdep/libdep_1.0-1_amd64.deb", lib)
	d := DebianLayer{Suite: "trixie", Mirror: a.mirror(), Packages: []string{"tool"},
		Links: map[string]string{"usr/sbin/tool-alt": "../bin/tool"},
		Lock: []DebianPackage{
			{Package: "libdep", Version: "1.0-1", File: "pool/main/libd/libdep/libdep_1.0-1_amd64.deb", SHA256: libSum},
			{Package: "tool", Version: "1:2.0-1", File: "pool/main/t/tool/tool_2.0-1_amd64.deb", SHA256: toolSum},
		}}
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)

	got := layerEntries(t, c, d)
	for _, want := range []string{"usr/bin/tool", "usr/lib/x86_64-linux-gnu/libtool.so.1", "usr/lib/x86_64-linux-gnu/libdep.so.1", "bin", "usr/sbin/tool-alt"} {
		assert.Contains(t, got, want, "the layer lacks it")
	}
	if assert.Contains(t, got, "bin") {
		assert.Equal(t, "usr/bin", got["bin"].Linkname, "bin is the merged-/usr link")
	}
	assert.NotContains(t, got, "bin/tool", "a path under /bin is moved to /usr/bin")
	assert.NotContains(t, got, "usr/share/doc/tool/copyright", "documentation is dropped")
	assert.Equal(t, int32(2), a.hits.Load(), "requests to the archive")

	// The archive drops both files (a point release): a layer made anew
	// (another epoch, so another layer) still builds from the .deb files
	// the cache keeps by content, without asking the archive.
	delete(a.files, "pool/main/t/tool/tool_2.0-1_amd64.deb")
	delete(a.files, "pool/main/libd/libdep/libdep_1.0-1_amd64.deb")
	_, err = debianLayerFromCache(context.Background(), c, d, time.Unix(1, 0), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Equal(t, int32(2), a.hits.Load(), "requests to the archive: cached .deb files are not fetched again")

	// Another build host, with an empty cache: the error names the lock
	// entry and says how to fix it.
	fresh, err := cache.New(t.TempDir())
	require.NoError(t, err)
	_, err = debianLayerFromCache(context.Background(), fresh, d, time.Unix(1767225600, 0), slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, ErrDebGone)
	for _, want := range []string{"debian.lock[0]", "libdep 1.0-1 is no longer in the archive", "404", "make pin", "debian.mirror", "snapshot"} {
		assert.ErrorContains(t, err, want)
	}
	_, ok := fresh.Lookup(debianCacheKind, mustKey(t, d))
	assert.False(t, ok, "a layer was cached after a failure")
}

func TestLockedDebianLayerIsReproducible(t *testing.T) {
	tool, sum := makeDeb(t, "tool", "2.0-1", map[string]string{"usr/bin/tool": "x", "usr/bin/other": "y"})
	a := newFakeArchive(t)
	a.publish("pool/main/t/tool/tool_2.0-1_amd64.deb", tool)
	d := DebianLayer{Suite: "trixie", Mirror: a.mirror(), Packages: []string{"tool"},
		Lock: []DebianPackage{{Package: "tool", Version: "2.0-1", File: "pool/main/t/tool/tool_2.0-1_amd64.deb", SHA256: sum}}}
	var digests []string
	for range 2 {
		c, err := cache.New(t.TempDir())
		require.NoError(t, err)
		l, err := debianLayerFromCache(context.Background(), c, d, time.Unix(1767225600, 0), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		dg, err := l.Digest()
		require.NoError(t, err)
		digests = append(digests, dg.String())
	}
	assert.Equal(t, digests[0], digests[1], "two builds of the same lock")
}

func TestLockedDebWithOtherContent(t *testing.T) {
	tool, _ := makeDeb(t, "tool", "2.0-1", map[string]string{"usr/bin/tool": "x"})
	a := newFakeArchive(t)
	a.publish("pool/main/t/tool/tool_2.0-1_amd64.deb", tool)
	d := DebianLayer{Suite: "trixie", Mirror: a.mirror(), Packages: []string{"tool"},
		Lock: []DebianPackage{{Package: "tool", Version: "2.0-1", File: "pool/main/t/tool/tool_2.0-1_amd64.deb", SHA256: strings.Repeat("ab", 32)}}}
	c, err := cache.New(t.TempDir())
	require.NoError(t, err)
	_, err = debianLayerFromCache(context.Background(), c, d, time.Unix(0, 0), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "but the lock says "+strings.Repeat("ab", 32), "a sha256 mismatch")
	require.NotErrorIs(t, err, ErrDebGone)
	_, ok := c.Lookup(debCacheKind, strings.Repeat("ab", 32))
	assert.False(t, ok, "a file with the wrong content was kept")
}

func TestParsePackagesIndex(t *testing.T) {
	index := `Package: libc6
Source: glibc
Version: 2.41-12+deb13u5
Architecture: amd64
Description: GNU C Library: Shared libraries
 Contains the standard libraries.
Filename: pool/main/g/glibc/libc6_2.41-12+deb13u5_amd64.deb
Size: 2851232
SHA256: 1111111111111111111111111111111111111111111111111111111111111111

Package: conntrack
Version: 1:1.4.8-2
Filename: pool/main/c/conntrack-tools/conntrack_1.4.8-2_amd64.deb
SHA256: 2222222222222222222222222222222222222222222222222222222222222222
`
	out := map[string]DebianPackage{}
	require.NoError(t, parsePackagesIndex(strings.NewReader(index), out))
	want := DebianPackage{Package: "libc6", Version: "2.41-12+deb13u5",
		File: "pool/main/g/glibc/libc6_2.41-12+deb13u5_amd64.deb", SHA256: strings.Repeat("1", 64)}
	assert.Equal(t, want, out[strings.Repeat("1", 64)], "libc6")
	assert.Equal(t, "1:1.4.8-2", out[strings.Repeat("2", 64)].Version, "conntrack version")
}

func mustKey(t *testing.T, d DebianLayer) string {
	t.Helper()
	k, err := debianLayerKey(d, time.Unix(1767225600, 0))
	require.NoError(t, err)
	return k
}

// A lock that misses a package the resolution installed is refused by
// name (mmdebstrap once deleted the essential packages' files, and the
// lock missed libc6).
func TestMissingFromLock(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status")
	require.NoError(t, os.WriteFile(status, []byte("Package: libc6\nStatus: install ok installed\nVersion: 2.41-12\n\n"+
		"Package: bash\nStatus: install ok installed\n\nPackage: gone\nStatus: deinstall ok config-files\n"), 0o644))
	missing, err := missingFromLock(status, []DebianPackage{{Package: "bash"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"libc6"}, missing)
	missing, err = missingFromLock(status, []DebianPackage{{Package: "bash"}, {Package: "libc6"}})
	require.NoError(t, err)
	assert.Empty(t, missing)
	missing, err = missingFromLock(filepath.Join(t.TempDir(), "none"), nil)
	require.NoError(t, err)
	assert.Empty(t, missing, "nothing installed (extract mode)")
}
