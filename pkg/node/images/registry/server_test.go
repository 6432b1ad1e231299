package registry

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestPing(t *testing.T) {
	srv, _, _ := layoutServer(t, newFixture(t))
	for _, p := range []string{"/v2/", "/v2"} {
		resp, body := do(t, http.MethodGet, srv.URL+p, nil)
		if resp.StatusCode != http.StatusOK || string(body) != "{}" {
			t.Fatalf("GET %s: %d %q", p, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Docker-Distribution-API-Version"); got != "registry/2.0" {
			t.Fatalf("API version header %q", got)
		}
	}
}

func TestManifestByTagAndDigest(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	amd := digestOf(t, f.pauseAMD64)
	for _, tc := range []struct {
		name, path string
		raw        []byte
		mediaType  types.MediaType
		digest     v1.Hash
	}{
		{"index by tag", "/v2/registry.k8s.io/pause/manifests/3.10", rawOf(t, f.pause), types.OCIImageIndex, digestOf(t, f.pause)},
		{"index by digest", "/v2/registry.k8s.io/pause/manifests/" + digestOf(t, f.pause).String(), rawOf(t, f.pause), types.OCIImageIndex, digestOf(t, f.pause)},
		{"child by digest", "/v2/registry.k8s.io/pause/manifests/" + amd.String(), rawOf(t, f.pauseAMD64), types.OCIManifestSchema1, amd},
		{"docker image by tag", "/v2/docker.io/library/hello/manifests/1.0", rawOf(t, f.hello), types.DockerManifestSchema2, digestOf(t, f.hello)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, http.MethodGet, srv.URL+tc.path, http.Header{"Accept": {string(tc.mediaType)}})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if !bytes.Equal(body, tc.raw) {
				t.Fatalf("body differs from the manifest")
			}
			checkHeaders(t, resp, string(tc.mediaType), tc.digest, len(tc.raw))

			resp, body = do(t, http.MethodHead, srv.URL+tc.path, nil)
			if resp.StatusCode != http.StatusOK || len(body) != 0 {
				t.Fatalf("HEAD: status %d, %d body bytes", resp.StatusCode, len(body))
			}
			checkHeaders(t, resp, string(tc.mediaType), tc.digest, len(tc.raw))
		})
	}
}

func checkHeaders(t *testing.T, resp *http.Response, mediaType string, d v1.Hash, size int) {
	t.Helper()
	want := map[string]string{
		"Content-Type":          mediaType,
		"Docker-Content-Digest": d.String(),
		"Content-Length":        strconv.Itoa(size),
		"Etag":                  `"` + d.String() + `"`,
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

func TestConditionalGet(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	d := digestOf(t, f.pause)
	resp, _ := do(t, http.MethodGet, srv.URL+"/v2/registry.k8s.io/pause/manifests/3.10",
		http.Header{"If-None-Match": {`"` + d.String() + `"`}})
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d, want 304", resp.StatusCode)
	}
}

func TestBlobGetAndRange(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	ls, err := f.tools.Layers()
	must(t, err)
	d, err := ls[0].Digest()
	must(t, err)
	rc, err := ls[0].Compressed()
	must(t, err)
	var want bytes.Buffer
	_, err = want.ReadFrom(rc)
	must(t, err)
	url := srv.URL + "/v2/ghcr.io/acme/tools/blobs/" + d.String()

	resp, body := do(t, http.MethodGet, url, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want.Bytes()) {
		t.Fatalf("GET: status %d, %d bytes (want %d)", resp.StatusCode, len(body), want.Len())
	}
	checkHeaders(t, resp, "application/octet-stream", d, want.Len())

	resp, body = do(t, http.MethodHead, url, nil)
	if resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD: status %d, %d body bytes", resp.StatusCode, len(body))
	}
	checkHeaders(t, resp, "application/octet-stream", d, want.Len())

	resp, body = do(t, http.MethodGet, url, http.Header{"Range": {"bytes=100-1099"}})
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("range: status %d", resp.StatusCode)
	}
	if !bytes.Equal(body, want.Bytes()[100:1100]) {
		t.Fatalf("range: wrong bytes")
	}
	if got, wantCR := resp.Header.Get("Content-Range"), "bytes 100-1099/"+strconv.Itoa(want.Len()); got != wantCR {
		t.Fatalf("Content-Range %q, want %q", got, wantCR)
	}

	// Blobs are addressed by digest alone, whatever the repository name.
	resp, body = do(t, http.MethodGet, srv.URL+"/v2/pause/blobs/"+d.String(), nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want.Bytes()) {
		t.Fatalf("GET under another name: status %d", resp.StatusCode)
	}
}

func TestErrors(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	unknown := "sha256:" + string(bytes.Repeat([]byte("ab"), 32))
	helloDigest := digestOf(t, f.hello).String()
	for _, tc := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"unknown tag", "GET", "/v2/registry.k8s.io/pause/manifests/9.9", 404, codeManifestUnknown},
		{"unknown manifest digest", "GET", "/v2/registry.k8s.io/pause/manifests/" + unknown, 404, codeManifestUnknown},
		{"digest of another repository", "GET", "/v2/registry.k8s.io/pause/manifests/" + helloDigest, 404, codeManifestUnknown},
		{"unknown name", "GET", "/v2/registry.k8s.io/nope/manifests/1", 404, codeNameUnknown},
		{"unknown name, HEAD", "HEAD", "/v2/registry.k8s.io/nope/manifests/1", 404, ""},
		{"unknown blob", "GET", "/v2/registry.k8s.io/pause/blobs/" + unknown, 404, codeBlobUnknown},
		{"malformed blob digest", "GET", "/v2/registry.k8s.io/pause/blobs/sha256:xyz", 400, codeDigestInvalid},
		{"short blob digest", "GET", "/v2/registry.k8s.io/pause/blobs/sha256:abcd", 400, codeDigestInvalid},
		{"unknown algorithm", "GET", "/v2/registry.k8s.io/pause/blobs/md5:" + unknown[7:39], 400, codeDigestInvalid},
		{"malformed manifest digest", "GET", "/v2/registry.k8s.io/pause/manifests/sha256:1234", 400, codeDigestInvalid},
		{"bad name", "GET", "/v2/registry.k8s.io/Pa..use/manifests/1", 400, codeNameInvalid},
		{"bad ns", "GET", "/v2/pause/manifests/3.10?ns=a/b", 400, codeNameInvalid},
		{"unknown endpoint", "GET", "/v2/pause/whatever/x", 404, codeUnsupported},
		{"outside /v2", "GET", "/v1/_ping", 404, codeUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.method, srv.URL+tc.path, nil)
			if tc.code == "" {
				if resp.StatusCode != tc.status || len(body) != 0 {
					t.Fatalf("status %d (%d body bytes), want %d", resp.StatusCode, len(body), tc.status)
				}
				return
			}
			wantError(t, resp, body, tc.status, tc.code)
		})
	}
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	d := digestOf(t, f.hello).String()
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/v2/docker.io/library/hello/manifests/2.0"},
		{"DELETE", "/v2/docker.io/library/hello/manifests/" + d},
		{"DELETE", "/v2/docker.io/library/hello/blobs/" + d},
		{"POST", "/v2/docker.io/library/hello/blobs/uploads/"},
		{"PATCH", "/v2/docker.io/library/hello/blobs/uploads/1234"},
		{"PUT", "/v2/docker.io/library/hello/blobs/uploads/1234?digest=" + d},
		{"GET", "/v2/docker.io/library/hello/blobs/uploads/1234"},
	} {
		resp, body := do(t, tc.method, srv.URL+tc.path, nil)
		wantError(t, resp, body, http.StatusMethodNotAllowed, codeUnsupported)
	}
}

func TestNameResolution(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	pause, hello := digestOf(t, f.pause).String(), digestOf(t, f.hello).String()
	for _, tc := range []struct {
		path   string
		digest string // "" for NAME_UNKNOWN
	}{
		{"/v2/pause/manifests/3.10?ns=registry.k8s.io", pause},
		{"/v2/library/hello/manifests/1.0?ns=docker.io", hello},
		{"/v2/registry.k8s.io/pause/manifests/3.10", pause}, // a full repository
		{"/v2/pause/manifests/3.10", pause},                 // the only repository with this path
		{"/v2/library/hello/manifests/1.0", hello},
		{"/v2/hello/manifests/1.0?ns=docker.io", ""}, // no library/ guessing
		{"/v2/pause/manifests/3.10?ns=k8s.gcr.io", ""},
		{"/v2/team/app/manifests/1", ""}, // ambiguous: quay.io and ghcr.io
	} {
		resp, body := do(t, http.MethodGet, srv.URL+tc.path, nil)
		if tc.digest == "" {
			wantError(t, resp, body, http.StatusNotFound, codeNameUnknown)
			continue
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != tc.digest {
			t.Errorf("%s: status %d digest %s, want %s", tc.path, resp.StatusCode, resp.Header.Get("Docker-Content-Digest"), tc.digest)
		}
	}
}

func TestTagsAndCatalog(t *testing.T) {
	f := newFixture(t)
	srv, _, _ := layoutServer(t, f)
	var tags struct {
		Name string
		Tags []string
	}
	resp, body := do(t, http.MethodGet, srv.URL+"/v2/pause/tags/list?ns=registry.k8s.io", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tags: %d %s", resp.StatusCode, body)
	}
	must(t, json.Unmarshal(body, &tags))
	if tags.Name != "pause" || !slices.Equal(tags.Tags, []string{"3.10"}) {
		t.Fatalf("tags: %+v", tags)
	}
	resp, body = do(t, http.MethodGet, srv.URL+"/v2/nope/tags/list?ns=registry.k8s.io", nil)
	wantError(t, resp, body, http.StatusNotFound, codeNameUnknown)

	var cat struct{ Repositories []string }
	resp, body = do(t, http.MethodGet, srv.URL+"/v2/_catalog", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("catalog: %d %s", resp.StatusCode, body)
	}
	must(t, json.Unmarshal(body, &cat))
	want := []string{helloRepo, "ghcr.io/acme/tools", "ghcr.io/team/app", "quay.io/team/app", pauseRepo}
	if !slices.Equal(cat.Repositories, want) {
		t.Fatalf("catalog %v, want %v", cat.Repositories, want)
	}
	_, body = do(t, http.MethodGet, srv.URL+"/v2/_catalog?n=2&last="+helloRepo, nil)
	must(t, json.Unmarshal(body, &cat))
	if !slices.Equal(cat.Repositories, want[1:3]) {
		t.Fatalf("paginated catalog %v, want %v", cat.Repositories, want[1:3])
	}
}

func TestParseRoute(t *testing.T) {
	for _, tc := range []struct {
		path string
		want route
		ok   bool
	}{
		{"/v2/a/manifests/b/blobs/sha256:1", route{routeBlob, "a/manifests/b", "sha256:1"}, true},
		{"/v2/a/blobs/b/manifests/t", route{routeManifest, "a/blobs/b", "t"}, true},
		{"/v2/a/b/tags/list", route{routeTags, "a/b", ""}, true},
		{"/v2/a/manifests/", route{}, false},
		{"/v2/a/manifests/x/y", route{}, false},
	} {
		got, ok := parseRoute(tc.path)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseRoute(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}
