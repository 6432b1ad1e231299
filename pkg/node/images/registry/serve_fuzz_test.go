package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

// fuzzLayout is a small OCI layout written byte for byte the same every
// time, so the fuzz targets' seeds can name its digests: an index of two
// images (OCI and Docker media types), a referrer of one of them, and an
// image whose layer, and another whose manifest, are corrupt on disk.
type fuzzLayout struct {
	dir string
	// good is the content that may be served, by digest; a manifest's
	// media type is set, a blob's is empty.
	good map[v1.Hash]fuzzContent
	// corrupt are digests whose files do not match them.
	corrupt []v1.Hash
	// tags maps each tag to the manifests it names (in any repository).
	tags  map[string][]v1.Hash
	repos []string

	config, layer, referrer      v1.Hash
	index, ociImage, dockerImage v1.Hash
	brokenLayer, brokenManifest  v1.Hash
	brokenLayerImg               v1.Hash
}

type fuzzContent struct {
	mediaType types.MediaType
	raw       []byte
	subject   v1.Hash // a referrer's subject
}

// The repositories and tags of fuzzLayout.
const (
	fuzzPause   = "registry.k8s.io/pause:3.10"   // the index
	fuzzHello   = "docker.io/library/hello:1.0"  // the Docker image, its entry without a media type
	fuzzAppQuay = "quay.io/team/app:1"           // the OCI image; "team/app" is ambiguous
	fuzzAppGHCR = "ghcr.io/team/app:1"           // the same
	fuzzSig     = "quay.io/team/app:sig"         // the referrer of the OCI image
	fuzzBrokenL = "ghcr.io/acme/broken:layer"    // an image whose layer is corrupt
	fuzzBrokenM = "ghcr.io/acme/broken:manifest" // an image whose manifest is corrupt
)

func newFuzzLayout(tb testing.TB) *fuzzLayout {
	tb.Helper()
	l := &fuzzLayout{dir: filepath.Join(tb.TempDir(), "layout"), good: map[v1.Hash]fuzzContent{}, tags: map[string][]v1.Hash{}}
	blobs := filepath.Join(l.dir, "blobs", "sha256")
	require.NoError(tb, os.MkdirAll(blobs, 0o755))
	put := func(mt types.MediaType, raw []byte) v1.Descriptor {
		d, n, err := v1.SHA256(bytes.NewReader(raw))
		require.NoError(tb, err)
		require.NoError(tb, os.WriteFile(filepath.Join(blobs, d.Hex), raw, 0o644))
		l.good[d] = fuzzContent{mediaType: mt, raw: raw}
		return v1.Descriptor{MediaType: mt, Digest: d, Size: n}
	}
	asBlob := func(d v1.Descriptor, mt types.MediaType) v1.Descriptor {
		c := l.good[d.Digest]
		c.mediaType = ""
		l.good[d.Digest] = c
		d.MediaType = mt
		return d
	}
	marshal := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(tb, err)
		return b
	}
	manifest := func(mt, configType types.MediaType, config v1.Descriptor, layers ...v1.Descriptor) map[string]any {
		config.MediaType = configType
		return map[string]any{"schemaVersion": 2, "mediaType": mt, "config": config, "layers": layers}
	}
	config := asBlob(put("", []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)), types.OCIConfigJSON)
	empty := asBlob(put("", []byte(`{}`)), "application/vnd.oci.empty.v1+json")
	layer := asBlob(put("", []byte("layer one: not really a tar, but its digest is right")), types.OCILayer)
	dockerLayer := asBlob(put("", []byte("layer two, of the Docker image")), types.DockerLayer)
	oci := put(types.OCIManifestSchema1, marshal(manifest(types.OCIManifestSchema1, types.OCIConfigJSON, config, layer)))
	docker := put(types.DockerManifestSchema2, marshal(manifest(types.DockerManifestSchema2, types.DockerConfigJSON, config, dockerLayer)))
	amd64, arm64 := oci, docker
	amd64.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64.Platform = &v1.Platform{OS: "linux", Architecture: "arm64"}
	index := put(types.OCIImageIndex, marshal(map[string]any{
		"schemaVersion": 2, "mediaType": types.OCIImageIndex, "manifests": []v1.Descriptor{amd64, arm64},
	}))
	sig := manifest(types.OCIManifestSchema1, "application/vnd.oci.empty.v1+json", empty, layer)
	sig["artifactType"] = "application/vnd.example.signature"
	sig["subject"] = oci
	referrer := put(types.OCIManifestSchema1, marshal(sig))
	c := l.good[referrer.Digest]
	c.subject = oci.Digest
	l.good[referrer.Digest] = c

	// An image whose layer file does not match its digest.
	brokenLayer := asBlob(put("", []byte("layer three, corrupt on disk")), types.OCILayer)
	brokenLayerImg := put(types.OCIManifestSchema1, marshal(manifest(types.OCIManifestSchema1, types.OCIConfigJSON, config, brokenLayer)))
	// An image whose manifest file does not match its digest.
	m := manifest(types.OCIManifestSchema1, types.OCIConfigJSON, config, layer)
	m["annotations"] = map[string]string{"corrupt": "on disk"}
	brokenManifest := put(types.OCIManifestSchema1, marshal(m))
	for _, d := range []v1.Hash{brokenLayer.Digest, brokenManifest.Digest} {
		p := filepath.Join(blobs, d.Hex)
		raw, err := os.ReadFile(p)
		require.NoError(tb, err)
		raw[len(raw)/2] ^= 0x20
		require.NoError(tb, os.WriteFile(p, raw, 0o644))
		delete(l.good, d)
		l.corrupt = append(l.corrupt, d)
	}

	var entries []v1.Descriptor
	for _, e := range []struct {
		desc v1.Descriptor
		ref  string
	}{
		{index, fuzzPause},
		{v1.Descriptor{Digest: docker.Digest, Size: docker.Size}, fuzzHello},
		{oci, fuzzAppQuay},
		{oci, fuzzAppGHCR},
		{referrer, fuzzSig},
		{brokenLayerImg, fuzzBrokenL},
		{brokenManifest, fuzzBrokenM},
	} {
		e.desc.Annotations = refAnnotations(e.ref)
		entries = append(entries, e.desc)
		repo, tag, _ := splitRef(e.ref)
		l.tags[tag] = append(l.tags[tag], e.desc.Digest)
		if !slices.Contains(l.repos, repo) {
			l.repos = append(l.repos, repo)
		}
	}
	require.NoError(tb, os.WriteFile(filepath.Join(l.dir, "oci-layout"), []byte(layoutMarker), 0o644))
	require.NoError(tb, os.WriteFile(filepath.Join(l.dir, "index.json"),
		marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: entries}), 0o644))

	l.config, l.layer, l.referrer = config.Digest, layer.Digest, referrer.Digest
	l.index, l.ociImage, l.dockerImage = index.Digest, oci.Digest, docker.Digest
	l.brokenLayer, l.brokenManifest = brokenLayer.Digest, brokenManifest.Digest
	l.brokenLayerImg = brokenLayerImg.Digest
	return l
}

// fuzzRequestHeader parses "Name: value" lines into a request's header.
func fuzzRequestHeader(lines string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(lines, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" {
			continue
		}
		h.Add(textproto.CanonicalMIMEHeaderKey(k), strings.TrimSpace(v))
	}
	return h
}

// FuzzServeHTTP sends requests — any method, path, query and header — to
// a server of fuzzLayout through ServeHTTP, and checks the response
// against the layout: never a 5xx; an error is the Distribution API's
// JSON error of a code its status allows; content goes out only when it
// matches its digest (the Docker-Content-Digest header is the digest
// asked for, or one the tag names, and the body, or the range of it a
// Range header asks, is that content's); tags, catalog and referrers list
// only what the layout holds, paginated as asked.
func FuzzServeHTTP(f *testing.F) {
	l := newFuzzLayout(f)
	for _, s := range []struct{ method, target, header string }{
		{"GET", "/v2/", ""},
		{"HEAD", "/v2/", ""},
		{"GET", "/v2", ""},
		{"GET", "/v2/_catalog?n=2&last=docker.io/library/hello", ""},
		{"GET", "/v2/registry.k8s.io/pause/tags/list", ""},
		{"HEAD", "/v2/registry.k8s.io/pause/tags/list?n=0", ""},
		{"GET", "/v2/team/app/tags/list?n=1&last=0&ns=quay.io", ""},
		{"GET", "/v2/registry.k8s.io/pause/manifests/3.10", "Accept: application/vnd.oci.image.index.v1+json"},
		{"HEAD", "/v2/pause/manifests/3.10", ""},
		{"GET", "/v2/library/hello/manifests/1.0?ns=docker.io", ""},
		{"GET", "/v2/registry.k8s.io/pause/manifests/" + l.dockerImage.String(), ""},
		{"GET", "/v2/team/app/manifests/1", ""},
		{"GET", "/v2/ghcr.io/acme/broken/manifests/manifest", ""},
		{"GET", "/v2/ghcr.io/acme/broken/manifests/" + l.brokenManifest.String(), ""},
		{"GET", "/v2/ghcr.io/acme/broken/blobs/" + l.brokenLayer.String(), ""},
		{"GET", "/v2/x/blobs/" + l.layer.String(), "Range: bytes=5-9"},
		{"GET", "/v2/x/blobs/" + l.layer.String(), "Range: bytes=0-1,-3"},
		{"GET", "/v2/x/blobs/" + l.config.String(), "Range: bytes=500-"},
		{"GET", "/v2/x/blobs/" + l.config.String(), `If-None-Match: "` + l.config.String() + `"`},
		{"GET", "/v2/x/blobs/" + l.config.String(), `If-Match: "nope"`},
		{"GET", "/v2/x/blobs/" + l.config.String(), "X-Terrarium-Registry-Peer: 1"},
		{"GET", "/v2/quay.io/team/app/referrers/" + l.ociImage.String(), ""},
		{"HEAD", "/v2/quay.io/team/app/referrers/" + l.ociImage.String(), ""},
		{"GET", "/v2/team/app/referrers/" + l.ociImage.String() + "?ns=quay.io&artifactType=application/vnd.example.signature", ""},
		{"GET", "/v2/x/blobs/sha256:1234", ""},
		{"GET", "/v2/x/manifests/md5:1234", ""},
		{"GET", "/v2/Pa..use/manifests/1", ""},
		{"GET", "/v2/pause/manifests/3.10?ns=a/b", ""},
		{"PUT", "/v2/docker.io/library/hello/manifests/2.0", ""},
		{"POST", "/v2/docker.io/library/hello/blobs/uploads/", ""},
		{"DELETE", "/v2/x/blobs/" + l.layer.String(), ""},
		{"GET", "/v2/pause/whatever/x", ""},
		{"GET", "/v1/_ping", ""},
	} {
		f.Add(s.method, s.target, s.header)
	}

	st, err := OpenLayout(l.dir, WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(f, err)
	s, err := New(WithStores(st), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, method, target, header string) {
		path, query, _ := strings.Cut(target, "?")
		req := &http.Request{
			Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: fuzzRequestHeader(header),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "registry.test", RemoteAddr: "192.0.2.1:1234",
		}
		req = req.WithContext(context.Background())
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		l.checkResponse(t, req, rec.Result(), rec.Body.Bytes())
	})
}

// checkResponse checks a response of a server of the layout's content.
func (l *fuzzLayout) checkResponse(t *testing.T, req *http.Request, res *http.Response, body []byte) {
	t.Helper()
	status := res.StatusCode
	if status >= 500 || status < 200 {
		t.Fatalf("%s %s: status %d: %s", req.Method, req.URL, status, body)
	}
	if v := res.Header.Get("Docker-Distribution-API-Version"); v != "registry/2.0" {
		t.Fatalf("Docker-Distribution-API-Version %q", v)
	}
	rt, ok := parseRoute(req.URL.Path)
	readOnly := ok && (rt.kind == routeUpload || (req.Method != http.MethodGet && req.Method != http.MethodHead))
	switch {
	case !ok:
		wantRegistryError(t, res, body, http.StatusNotFound)
		return
	case readOnly:
		wantRegistryError(t, res, body, http.StatusMethodNotAllowed)
		if res.Header.Get("Allow") != "GET, HEAD" {
			t.Fatalf("405 without Allow: GET, HEAD")
		}
		return
	case status >= 400 && status != http.StatusRequestedRangeNotSatisfiable && status != http.StatusPreconditionFailed:
		wantRegistryError(t, res, body, status)
		return
	}
	// A HEAD of content or referrers writes no body; of the JSON
	// answers it does, and net/http drops it.
	head := req.Method == http.MethodHead
	if head && len(body) != 0 && status != http.StatusRequestedRangeNotSatisfiable &&
		(rt.kind == routeManifest || rt.kind == routeBlob || rt.kind == routeReferrers) {
		t.Fatalf("HEAD: %d body bytes", len(body))
	}
	q := req.URL.Query()
	switch rt.kind {
	case routePing:
		if status != http.StatusOK || string(body) != "{}" {
			t.Fatalf("ping: %d %q", status, body)
		}
	case routeCatalog:
		var v struct{ Repositories []string }
		l.checkList(t, status, body, q, &v, &v.Repositories, l.repos)
	case routeTags:
		var v struct {
			Name string
			Tags []string
		}
		l.checkList(t, status, body, q, &v, &v.Tags, slices.Collect(func(yield func(string) bool) {
			for tag := range l.tags {
				if !yield(tag) {
					return
				}
			}
		}))
		if v.Name != rt.name {
			t.Fatalf("tags of %q answered for %q", rt.name, v.Name)
		}
	case routeReferrers:
		l.checkReferrers(t, status, res, body, rt, q, head)
	case routeManifest, routeBlob:
		l.checkContent(t, req, res, body, rt, head)
	default:
		t.Fatalf("route %+v answered %d", rt, status)
	}
}

// wantRegistryError checks a Distribution API error response: its JSON
// body holds one error, of a code the status allows.
func wantRegistryError(t *testing.T, res *http.Response, body []byte, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d (%s)", res.StatusCode, status, body)
	}
	var e struct{ Errors []regError }
	if err := json.Unmarshal(body, &e); err != nil || len(e.Errors) != 1 {
		t.Fatalf("status %d: not one registry error: %q (%v)", status, body, err)
	}
	allowed := map[int][]string{
		http.StatusBadRequest:       {codeNameInvalid, codeDigestInvalid},
		http.StatusNotFound:         {codeManifestUnknown, codeBlobUnknown, codeNameUnknown, codeUnsupported},
		http.StatusMethodNotAllowed: {codeUnsupported},
	}[status]
	if !slices.Contains(allowed, e.Errors[0].Code) {
		t.Fatalf("status %d with code %s", status, e.Errors[0].Code)
	}
	if mt := mediaTypeOf(res.Header.Get("Content-Type")); mt != "application/json" {
		t.Fatalf("an error of Content-Type %q", mt)
	}
}

// checkList checks a tags or catalog answer: sorted, without repeats,
// only names of the layout, after last and at most n of them.
func (l *fuzzLayout) checkList(t *testing.T, status int, body []byte, q url.Values, v any, list *[]string, known []string) {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("a list answered %d", status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("a list that is not JSON: %q", body)
	}
	if !slices.IsSorted(*list) || len(slices.Compact(slices.Clone(*list))) != len(*list) {
		t.Fatalf("a list not sorted, or with repeats: %q", *list)
	}
	for _, s := range *list {
		if !slices.Contains(known, s) {
			t.Fatalf("listed %q, which the layout does not hold", s)
		}
		if last := q.Get("last"); last != "" && s <= last {
			t.Fatalf("listed %q, not after last=%q", s, last)
		}
	}
	if n, err := strconv.Atoi(q.Get("n")); err == nil && n >= 0 && len(*list) > n {
		t.Fatalf("listed %d names, n=%d", len(*list), n)
	}
}

// checkReferrers checks a referrers answer: an OCI index of referrers of
// the digest asked about, of the artifact type asked for.
func (l *fuzzLayout) checkReferrers(t *testing.T, status int, res *http.Response, body []byte, rt route, q url.Values, head bool) {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("referrers answered %d", status)
	}
	if ct := res.Header.Get("Content-Type"); ct != string(types.OCIImageIndex) {
		t.Fatalf("referrers of Content-Type %q", ct)
	}
	if head {
		return
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatalf("referrers that are not an index: %q", body)
	}
	for _, d := range idx.Manifests {
		c, ok := l.good[d.Digest]
		if !ok || c.subject.String() != rt.ref {
			t.Fatalf("listed %s as a referrer of %s", d.Digest, rt.ref)
		}
		if at := q.Get("artifactType"); at != "" && d.ArtifactType != at {
			t.Fatalf("listed a referrer of type %q, asked for %q", d.ArtifactType, at)
		}
	}
}

// checkContent checks an answer of a manifest or a blob: it is served
// only whole and intact, as the content of the digest asked for (or one
// the tag names).
func (l *fuzzLayout) checkContent(t *testing.T, req *http.Request, res *http.Response, body []byte, rt route, head bool) {
	t.Helper()
	dh := res.Header.Get("Docker-Content-Digest")
	d, err := v1.NewHash(dh)
	if err != nil {
		t.Fatalf("%s %s: status %d without a digest (%q)", req.Method, req.URL, res.StatusCode, dh)
	}
	c, ok := l.good[d]
	if !ok {
		t.Fatalf("%s %s: served %s, which is not intact content of the layout", req.Method, req.URL, d)
	}
	switch {
	case rt.kind == routeBlob || isDigestRef(rt.ref):
		if dh != rt.ref {
			t.Fatalf("%s: served %s", rt.ref, dh)
		}
	case !slices.Contains(l.tags[rt.ref], d):
		t.Fatalf("tag %s: served %s", rt.ref, dh)
	}
	wantType := "application/octet-stream"
	if rt.kind == routeManifest {
		if c.mediaType == "" {
			t.Fatalf("%s: served the blob %s as a manifest", req.URL, d)
		}
		wantType = string(c.mediaType)
	}
	switch res.StatusCode {
	case http.StatusOK:
		if ct := res.Header.Get("Content-Type"); ct != wantType {
			t.Fatalf("%s: Content-Type %q, want %q", req.URL, ct, wantType)
		}
		if cl := res.Header.Get("Content-Length"); cl != strconv.Itoa(len(c.raw)) {
			t.Fatalf("%s: Content-Length %q, want %d", req.URL, cl, len(c.raw))
		}
		if !head && !bytes.Equal(body, c.raw) {
			t.Fatalf("%s: the body is not the content of %s", req.URL, d)
		}
	case http.StatusPartialContent:
		if head {
			return
		}
		mt, params, err := mime.ParseMediaType(res.Header.Get("Content-Type"))
		if err == nil && mt == "multipart/byteranges" {
			mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
			for {
				p, err := mr.NextPart()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("a multipart answer that does not parse: %v", err)
				}
				part, err := io.ReadAll(p)
				if err != nil {
					t.Fatalf("a multipart answer that does not parse: %v", err)
				}
				checkRange(t, p.Header.Get("Content-Range"), part, c.raw)
			}
			return
		}
		checkRange(t, res.Header.Get("Content-Range"), body, c.raw)
	case http.StatusNotModified, http.StatusPreconditionFailed:
		if len(body) != 0 {
			t.Fatalf("status %d with a body", res.StatusCode)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// net/http says the size unless the Range header does not parse.
		if cr := res.Header.Get("Content-Range"); cr != "" && cr != fmt.Sprintf("bytes */%d", len(c.raw)) {
			t.Fatalf("416 with Content-Range %q", cr)
		}
	default:
		t.Fatalf("%s %s: status %d", req.Method, req.URL, res.StatusCode)
	}
}

// checkRange checks that part is the range of content Content-Range says.
func checkRange(t *testing.T, contentRange string, part, content []byte) {
	t.Helper()
	var first, last, size int
	if _, err := fmt.Sscanf(contentRange, "bytes %d-%d/%d", &first, &last, &size); err != nil {
		t.Fatalf("Content-Range %q: %v", contentRange, err)
	}
	if size == len(content) && first == size && last == size-1 && len(part) == 0 {
		return // the empty range net/http answers "bytes=-0" with
	}
	if size != len(content) || first < 0 || first > last || last >= size || !bytes.Equal(part, content[first:last+1]) {
		t.Fatalf("Content-Range %q of %d bytes: not that range of the content's %d", contentRange, len(part), len(content))
	}
}
