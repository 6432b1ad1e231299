package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	pauseRepo = "registry.k8s.io/pause"
	pauseRef  = pauseRepo + ":3.10"
	helloRepo = "docker.io/library/hello"
	helloRef  = helloRepo + ":1.0"
	toolsRepo = "ghcr.io/acme/tools"
	toolsRef  = toolsRepo + ":v1"
	// Two repositories with the same path under different hosts.
	appQuay = "quay.io/team/app:1"
	appGHCR = "ghcr.io/team/app:1"
)

// fixture is an OCI layout holding test images, named like a node image's.
type fixture struct {
	dir        string
	pause      v1.ImageIndex // OCI index: linux/amd64 and linux/arm64
	pauseAMD64 v1.Image
	pauseARM64 v1.Image
	hello      v1.Image // Docker schema 2 image
	tools      v1.Image // single OCI image
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{dir: filepath.Join(t.TempDir(), "layout")}
	f.pauseAMD64 = ociImage(t, "amd64", 2, 2048)
	f.pauseARM64 = ociImage(t, "arm64", 2, 2048)
	hello, err := random.Image(4096, 2)
	must(t, err)
	f.hello = withPlatform(t, hello, "amd64")
	f.tools = ociImage(t, "amd64", 1, 100_000)

	p, err := layout.Write(f.dir, empty.Index)
	must(t, err)
	f.pause = writeIndex(t, p, pauseRef, f.pauseAMD64, f.pauseARM64)
	must(t, p.AppendImage(f.hello, layout.WithAnnotations(refAnnotations(helloRef))))
	must(t, p.AppendImage(f.tools, layout.WithAnnotations(refAnnotations(toolsRef))))
	must(t, p.AppendImage(ociImage(t, "amd64", 1, 100), layout.WithAnnotations(refAnnotations(appQuay))))
	must(t, p.AppendImage(ociImage(t, "amd64", 1, 100), layout.WithAnnotations(refAnnotations(appGHCR))))
	return f
}

func refAnnotations(ref string) map[string]string {
	return map[string]string{annotationRefName: ref, annotationContainerdRef: ref}
}

// writeIndex writes a multi-platform OCI index of images into a layout,
// named ref. The index is serialized the way containerd, buildkit and
// skopeo (image-spec structs) do; go-containerregistry's mutate adds
// artifactType fields that skopeo 1.9 drops when it copies an index, which
// would change the digest.
func writeIndex(t testing.TB, p layout.Path, ref string, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	type platform struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	}
	type descriptor struct {
		MediaType types.MediaType `json:"mediaType"`
		Digest    v1.Hash         `json:"digest"`
		Size      int64           `json:"size"`
		Platform  platform        `json:"platform"`
	}
	idx := struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     types.MediaType `json:"mediaType"`
		Manifests     []descriptor    `json:"manifests"`
	}{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, img := range imgs {
		must(t, p.WriteImage(img))
		cfg, err := img.ConfigFile()
		must(t, err)
		idx.Manifests = append(idx.Manifests, descriptor{
			MediaType: types.OCIManifestSchema1,
			Digest:    digestOf(t, img),
			Size:      int64(len(rawOf(t, img))),
			Platform:  platform{Architecture: cfg.Architecture, OS: cfg.OS},
		})
	}
	raw, err := json.Marshal(idx)
	must(t, err)
	d, n, err := v1.SHA256(bytes.NewReader(raw))
	must(t, err)
	must(t, p.WriteBlob(d, io.NopCloser(bytes.NewReader(raw))))
	must(t, p.AppendDescriptor(v1.Descriptor{
		MediaType: types.OCIImageIndex, Digest: d, Size: n, Annotations: refAnnotations(ref),
	}))
	all, err := p.ImageIndex()
	must(t, err)
	ii, err := all.ImageIndex(d)
	must(t, err)
	return ii
}

// ociImage is a random image with OCI media types throughout.
func ociImage(t testing.TB, arch string, layers int, size int64) v1.Image {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for range layers {
		l, err := random.Layer(size, types.OCILayer)
		must(t, err)
		img, err = mutate.AppendLayers(img, l)
		must(t, err)
	}
	return withPlatform(t, img, arch)
}

func withPlatform(t testing.TB, img v1.Image, arch string) v1.Image {
	t.Helper()
	cfg, err := img.ConfigFile()
	must(t, err)
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	img, err = mutate.ConfigFile(img, cfg)
	must(t, err)
	return img
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serveUntilCleanup serves h on ln until the test ends; a Serve that
// fails or does not shut down cleanly fails the test.
func serveUntilCleanup(t testing.TB, ln net.Listener, h http.Handler) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
}

func digestOf(t testing.TB, x interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	d, err := x.Digest()
	must(t, err)
	return d
}

func rawOf(t testing.TB, x interface{ RawManifest() ([]byte, error) }) []byte {
	t.Helper()
	raw, err := x.RawManifest()
	must(t, err)
	return raw
}

// lockedBuffer collects log output from concurrent handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t testing.TB) (*slog.Logger, *lockedBuffer) {
	buf := &lockedBuffer{}
	h := slog.NewTextHandler(io.MultiWriter(buf, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h), buf
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startServer serves a New(opts...) server on 127.0.0.1 with a test logger.
func startServer(t testing.TB, opts ...Option) (*httptest.Server, *Server, *lockedBuffer) {
	t.Helper()
	log, buf := testLogger(t)
	s, err := New(append([]Option{WithLogger(log)}, opts...)...)
	must(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, s, buf
}

// layoutServer serves the fixture's layout.
func layoutServer(t testing.TB, f *fixture) (*httptest.Server, *Server, *lockedBuffer) {
	t.Helper()
	st, err := OpenLayout(f.dir)
	must(t, err)
	return startServer(t, WithStores(st))
}

func do(t testing.TB, method, url string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
	must(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, body
}

// wantError checks a registry error response.
func wantError(t testing.TB, resp *http.Response, body []byte, status int, code string) regError {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d (body %s)", resp.Request.Method, resp.Request.URL, resp.StatusCode, status, body)
	}
	var e struct{ Errors []regError }
	if err := json.Unmarshal(body, &e); err != nil || len(e.Errors) != 1 {
		t.Fatalf("%s: bad error body %q: %v", resp.Request.URL, body, err)
	}
	if e.Errors[0].Code != code {
		t.Fatalf("%s: code %s, want %s", resp.Request.URL, e.Errors[0].Code, code)
	}
	return e.Errors[0]
}

// needTool fails (never skips) when an external client is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: run make deps", name)
	}
	return p
}

// layerPath is the file of the first layer of img inside a layout.
func layerPath(t testing.TB, dir string, img v1.Image) (string, v1.Hash) {
	t.Helper()
	ls, err := img.Layers()
	must(t, err)
	d, err := ls[0].Digest()
	must(t, err)
	return filepath.Join(dir, "blobs", d.Algorithm, d.Hex), d
}

// corrupt flips one byte of a file in place.
func corrupt(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	b[len(b)/2] ^= 0xff
	must(t, os.Chmod(path, 0o644))
	must(t, os.WriteFile(path, b, 0o644))
}
