package registry

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestCorruptBlobIsNotServed(t *testing.T) {
	f := newFixture(t)
	srv, s, logs := layoutServer(t, f)
	path, d := layerPath(t, f.dir, f.tools)
	corrupt(t, path) // after the server started, before the first fetch

	url := srv.URL + "/v2/ghcr.io/acme/tools/blobs/" + d.String()
	for range 2 {
		resp, body := do(t, http.MethodGet, url, nil)
		e := wantError(t, resp, body, http.StatusNotFound, codeBlobUnknown)
		if e.Detail != mismatchDetail {
			t.Fatalf("detail %q, want %q", e.Detail, mismatchDetail)
		}
	}
	resp, body := do(t, http.MethodHead, url, nil)
	if resp.StatusCode != http.StatusNotFound || len(body) != 0 {
		t.Fatalf("HEAD: status %d", resp.StatusCode)
	}
	st := s.Stats()
	if st.Verifications != 1 || st.Mismatches != 1 {
		t.Fatalf("stats %+v: want the corrupt blob hashed once", st)
	}
	if n := strings.Count(logs.String(), "content does not match its digest; not serving it"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), path) {
		t.Fatalf("log does not name %s:\n%s", path, logs)
	}
}

func TestCorruptManifestIsNotServed(t *testing.T) {
	f := newFixture(t)
	srv, _, logs := layoutServer(t, f)
	d := digestOf(t, f.pauseARM64)
	path := filepath.Join(f.dir, "blobs", "sha256", d.Hex)
	corrupt(t, path)

	resp, body := do(t, http.MethodGet, srv.URL+"/v2/pause/manifests/"+d.String()+"?ns=registry.k8s.io", nil)
	e := wantError(t, resp, body, http.StatusNotFound, codeManifestUnknown)
	if e.Detail != mismatchDetail {
		t.Fatalf("detail %q", e.Detail)
	}
	if !strings.Contains(logs.String(), path) {
		t.Fatalf("log does not name %s:\n%s", path, logs)
	}
	// The index and the other platform are still fine.
	resp, _ = do(t, http.MethodGet, srv.URL+"/v2/pause/manifests/3.10?ns=registry.k8s.io", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("index: status %d", resp.StatusCode)
	}
}

func TestVerifiedOnce(t *testing.T) {
	f := newFixture(t)
	srv, s, _ := layoutServer(t, f)
	_, d := layerPath(t, f.dir, f.tools)
	url := srv.URL + "/v2/ghcr.io/acme/tools/blobs/" + d.String()

	// Concurrent first requests share one hash.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			resp, err := http.Get(url)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close() // the status is what counts
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	first := s.Stats()
	if first.Verifications != 1 {
		t.Fatalf("after first fetches: %+v, want 1 verification", first)
	}
	resp, _ := do(t, http.MethodGet, url, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := s.Stats(); got.Verifications != first.Verifications || got.VerifiedBytes != first.VerifiedBytes {
		t.Fatalf("second fetch re-hashed: %+v then %+v", first, got)
	}
}

func TestVerifiedLimit(t *testing.T) {
	f := newFixture(t)
	st, err := OpenLayout(f.dir)
	must(t, err)
	srv, s, _ := startServer(t, WithStores(st), WithVerifiedLimit(1))
	_, a := layerPath(t, f.dir, f.tools)
	_, b := layerPath(t, f.dir, f.hello)
	for _, d := range []string{a.String(), b.String(), a.String(), a.String()} {
		resp, _ := do(t, http.MethodGet, srv.URL+"/v2/x/blobs/"+d, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if got := s.Stats().Verifications; got != 3 {
		t.Fatalf("%d verifications, want 3 (a, b, a again after eviction)", got)
	}
}

// A corrupt copy in the first store falls through to an intact one.
func TestCorruptFallsThroughToNextStore(t *testing.T) {
	f := newFixture(t)
	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", f.dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	first, err := OpenLayout(f.dir)
	must(t, err)
	second, err := OpenLayout(copyDir)
	must(t, err)
	srv, _, _ := startServer(t, WithStores(first, second))
	path, d := layerPath(t, f.dir, f.tools)
	corrupt(t, path)
	want, err := os.ReadFile(filepath.Join(copyDir, "blobs", "sha256", d.Hex))
	must(t, err)
	resp, body := do(t, http.MethodGet, srv.URL+"/v2/x/blobs/"+d.String(), nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
		t.Fatalf("status %d, %d bytes", resp.StatusCode, len(body))
	}
}
