package bundle

import (
	"archive/tar"
	"context"
	"errors"
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

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// makeDeb builds a real .deb with dpkg-deb from files (path → content; a
// path ending in "/" is a directory) and returns its path and sha256.
func makeDeb(t *testing.T, pkg, version string, files map[string]string) (string, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), pkg)
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: " + pkg + "\nVersion: " + version + "\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: test\n"
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(t.TempDir(), pkg+"_"+version+"_amd64.deb")
	out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	sum, err := fileSHA256(deb)
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
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
	if err != nil {
		t.Fatal(err)
	}

	got := layerEntries(t, c, d)
	for _, want := range []string{"usr/bin/tool", "usr/lib/x86_64-linux-gnu/libtool.so.1", "usr/lib/x86_64-linux-gnu/libdep.so.1", "bin", "usr/sbin/tool-alt"} {
		if _, ok := got[want]; !ok {
			t.Errorf("the layer lacks %s", want)
		}
	}
	if h := got["bin"]; h == nil || h.Linkname != "usr/bin" {
		t.Errorf("bin is not the merged-/usr link: %+v", h)
	}
	if _, ok := got["bin/tool"]; ok {
		t.Error("a path under /bin was not moved to /usr/bin")
	}
	if _, ok := got["usr/share/doc/tool/copyright"]; ok {
		t.Error("documentation was not dropped")
	}
	if n := a.hits.Load(); n != 2 {
		t.Errorf("the archive was asked %d times, want 2", n)
	}

	// The archive drops both files (a point release): a layer made anew
	// (another epoch, so another layer) still builds from the .deb files
	// the cache keeps by content, without asking the archive.
	delete(a.files, "pool/main/t/tool/tool_2.0-1_amd64.deb")
	delete(a.files, "pool/main/libd/libdep/libdep_1.0-1_amd64.deb")
	_, err = debianLayerFromCache(context.Background(), c, d, time.Unix(1, 0), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if n := a.hits.Load(); n != 2 {
		t.Errorf("the archive was asked %d times, want 2: cached .deb files are fetched again", n)
	}

	// Another build host, with an empty cache: the error names the lock
	// entry and says how to fix it.
	fresh, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = debianLayerFromCache(context.Background(), fresh, d, time.Unix(1767225600, 0), slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrDebGone) {
		t.Fatalf("err = %v, want ErrDebGone", err)
	}
	for _, want := range []string{"debian.lock[0]", "libdep 1.0-1 is no longer in the archive", "404", "make pin", "debian.mirror", "snapshot"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	_, ok := fresh.Lookup(debianCacheKind, mustKey(t, d))
	if ok {
		t.Error("a layer was cached after a failure")
	}
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
		if err != nil {
			t.Fatal(err)
		}
		l, err := debianLayerFromCache(context.Background(), c, d, time.Unix(1767225600, 0), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		dg, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, dg.String())
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same lock: %s and %s", digests[0], digests[1])
	}
}

func TestLockedDebWithOtherContent(t *testing.T) {
	tool, _ := makeDeb(t, "tool", "2.0-1", map[string]string{"usr/bin/tool": "x"})
	a := newFakeArchive(t)
	a.publish("pool/main/t/tool/tool_2.0-1_amd64.deb", tool)
	d := DebianLayer{Suite: "trixie", Mirror: a.mirror(), Packages: []string{"tool"},
		Lock: []DebianPackage{{Package: "tool", Version: "2.0-1", File: "pool/main/t/tool/tool_2.0-1_amd64.deb", SHA256: strings.Repeat("ab", 32)}}}
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = debianLayerFromCache(context.Background(), c, d, time.Unix(0, 0), slog.New(slog.DiscardHandler))
	if err == nil || errors.Is(err, ErrDebGone) || !strings.Contains(err.Error(), "but the lock says "+strings.Repeat("ab", 32)) {
		t.Fatalf("err = %v, want a sha256 mismatch", err)
	}
	_, ok := c.Lookup(debCacheKind, strings.Repeat("ab", 32))
	if ok {
		t.Error("a file with the wrong content was kept")
	}
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
	if err := parsePackagesIndex(strings.NewReader(index), out); err != nil {
		t.Fatal(err)
	}
	want := DebianPackage{Package: "libc6", Version: "2.41-12+deb13u5",
		File: "pool/main/g/glibc/libc6_2.41-12+deb13u5_amd64.deb", SHA256: strings.Repeat("1", 64)}
	if got := out[strings.Repeat("1", 64)]; got != want {
		t.Errorf("libc6 = %+v, want %+v", got, want)
	}
	if got := out[strings.Repeat("2", 64)].Version; got != "1:1.4.8-2" {
		t.Errorf("conntrack version = %q", got)
	}
}

func mustKey(t *testing.T, d DebianLayer) string {
	t.Helper()
	k, err := debianLayerKey(d, time.Unix(1767225600, 0))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
