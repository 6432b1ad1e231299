package registry

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

func openCache(t testing.TB) *Cache {
	t.Helper()
	log, _ := testLogger(t)
	c, err := OpenCache(filepath.Join(t.TempDir(), "cache"), WithLogger(log))
	must(t, err)
	return c
}

// blobFiles lists the blob files in a layout.
func blobFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestCachePut(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	data := []byte("hello, blob")
	d, n, err := v1.SHA256(bytes.NewReader(data))
	must(t, err)
	desc := v1.Descriptor{Digest: d, Size: n}

	bad := desc
	bad.Digest.Hex = strings.Repeat("0", 64)
	if err := c.Put(ctx, bad, bytes.NewReader(data)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong digest: %v", err)
	}
	short := desc
	short.Size++
	if err := c.Put(ctx, short, bytes.NewReader(data)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong size: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Put(cancelled, desc, bytes.NewReader(data)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if files := blobFiles(t, c.Dir()); len(files) != 0 {
		t.Fatalf("failed puts left %v", files)
	}
	if tmp, _ := os.ReadDir(filepath.Join(c.Dir(), ".tmp")); len(tmp) != 0 {
		t.Fatalf("failed puts left temporary files")
	}

	must(t, c.Put(ctx, desc, bytes.NewReader(data)))
	if !c.Has(d) {
		t.Fatal("blob missing after Put")
	}
	// Present already: the reader is not touched.
	must(t, c.Put(ctx, desc, errReader{}))
	content, err := c.Open(ctx, d)
	must(t, err)
	defer content.Close()
	if content.Size != n {
		t.Fatalf("size %d", content.Size)
	}
	if _, err := c.Open(ctx, bad.Digest); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("must not be read") }

func TestCacheAddAndReopen(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := openCache(t)
	if _, err := c.AddIndex(ctx, pauseRef, f.pause); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddImage(ctx, helloRef, f.hello); err != nil {
		t.Fatal(err)
	}
	src, err := OpenLayout(f.dir)
	must(t, err)
	if _, err := c.Add(ctx, src, toolsRepo, "v1"); err != nil {
		t.Fatal(err)
	}

	// Reopened, the cache knows the same names; it is a valid OCI layout.
	c2, err := OpenCache(c.Dir())
	must(t, err)
	repos, err := c2.Repositories(ctx)
	must(t, err)
	if want := []string{helloRepo, toolsRepo, pauseRepo}; !slices.Equal(repos, want) {
		t.Fatalf("repositories %v, want %v", repos, want)
	}
	desc, err := c2.Resolve(ctx, pauseRepo, digestOf(t, f.pauseARM64).String())
	if err != nil || desc.Digest != digestOf(t, f.pauseARM64) {
		t.Fatalf("child by digest: %v %v", desc, err)
	}
	p, err := layout.FromPath(c.Dir())
	must(t, err)
	idx, err := p.ImageIndex()
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 3 {
		t.Fatalf("index.json has %d entries, want 3", len(im.Manifests))
	}
	for _, m := range im.Manifests {
		if m.MediaType.IsIndex() {
			child, err := idx.ImageIndex(m.Digest)
			must(t, err)
			must(t, validate.Index(child))
		} else {
			child, err := idx.Image(m.Digest)
			must(t, err)
			must(t, validate.Image(child))
		}
	}

	// Re-tagging replaces the entry.
	if _, err := c2.AddImage(ctx, pauseRef, f.tools); err != nil {
		t.Fatal(err)
	}
	desc, err = c2.Resolve(ctx, pauseRepo, "3.10")
	if err != nil || desc.Digest != digestOf(t, f.tools) {
		t.Fatalf("retagged: %v %v", desc, err)
	}
	if _, err := c2.Resolve(ctx, pauseRepo, digestOf(t, f.pauseARM64).String()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old child still resolvable: %v", err)
	}

	// A server over the cache alone serves it.
	srv, _, _ := startServer(t, WithCache(c2))
	resp, _ := do(t, http.MethodGet, srv.URL+"/v2/library/hello/manifests/1.0?ns=docker.io", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != digestOf(t, f.hello).String() {
		t.Fatalf("served from cache: %d", resp.StatusCode)
	}
}

func TestAddLayout(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := openCache(t)
	refs, err := c.AddLayout(ctx, f.dir)
	must(t, err)
	slices.Sort(refs)
	want := []string{helloRef, toolsRef, appGHCR, appQuay, pauseRef}
	if !slices.Equal(refs, want) {
		t.Fatalf("refs %v, want %v", refs, want)
	}
	desc, err := c.Resolve(ctx, pauseRepo, "3.10")
	if err != nil || desc.Digest != digestOf(t, f.pause) {
		t.Fatalf("resolve: %v %v", desc, err)
	}
}

func TestAddLayoutCorrupt(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	path, d := layerPath(t, f.dir, f.pauseARM64)
	corrupt(t, path)
	c := openCache(t)
	_, err := c.AddLayout(ctx, f.dir)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("AddLayout: %v, want a digest mismatch", err)
	}
	if !strings.Contains(err.Error(), d.String()) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name blob %s (%s)", err, d, path)
	}
	repos, err := c.Repositories(ctx)
	must(t, err)
	if len(repos) != 0 {
		t.Fatalf("recorded %v", repos)
	}
	if files := blobFiles(t, c.Dir()); len(files) != 0 {
		t.Fatalf("left %d blobs", len(files))
	}
	c2, err := OpenCache(c.Dir())
	must(t, err)
	if repos, _ := c2.Repositories(ctx); len(repos) != 0 {
		t.Fatalf("index.json records %v", repos)
	}

	// A missing blob fails the same way.
	must(t, os.Remove(path))
	if _, err := c.AddLayout(ctx, f.dir); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), d.String()) {
		t.Fatalf("missing blob: %v", err)
	}
}

// skopeo can read the cache as an OCI layout.
func TestCacheIsReadableBySkopeo(t *testing.T) {
	skopeo := needTool(t, "skopeo")
	f := newFixture(t)
	c := openCache(t)
	_, err := c.AddImage(context.Background(), toolsRef, f.tools)
	must(t, err)
	out, err := exec.Command(skopeo, "--insecure-policy", "inspect", "--raw", "oci:"+c.Dir()+":"+toolsRef).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo inspect: %v: %s", err, out)
	}
	if !bytes.Equal(out, rawOf(t, f.tools)) {
		t.Fatalf("skopeo read a different manifest: %s", out)
	}
}
