package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

// The fuzzed peer's header may name its body by these placeholders, which
// it replaces with the body's digest and size: without them a mutated
// body would never match a digest the header names.
const (
	peerBodyDigest = "BODY_DIGEST"
	peerBodySize   = "BODY_SIZE"
)

// peerReply is what the fuzzed peer answers every request with.
type peerReply struct {
	status int
	header http.Header
	body   []byte
	digest v1.Hash // the body's
}

// newPeerReply makes a reply of the fuzzed status, header lines ("Name:
// value") and body. A status net/http cannot send as a final answer is
// 200.
func newPeerReply(t testing.TB, status int, lines string, body []byte) *peerReply {
	d, _, err := v1.SHA256(bytes.NewReader(body))
	require.NoError(t, err)
	if status < 200 || status > 599 {
		status = http.StatusOK
	}
	lines = strings.ReplaceAll(lines, peerBodyDigest, d.String())
	lines = strings.ReplaceAll(lines, peerBodySize, strconv.Itoa(len(body)))
	return &peerReply{status: status, header: fuzzRequestHeader(lines), body: body, digest: d}
}

// plain reports whether the reply is a 200 whose body reaches the client
// unchanged: no Content-Encoding or Transfer-Encoding of its own, no
// Content-Length but the body's, and a header a client can read (net/http
// sends control characters in a value as they are, and a client refuses
// them).
func (p *peerReply) plain() bool {
	if p.status != http.StatusOK || p.header.Get("Content-Encoding") != "" || p.header.Get("Transfer-Encoding") != "" {
		return false
	}
	for _, vs := range p.header {
		for _, v := range vs {
			if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' && r != '\r' && r != '\n' || r == 0x7f }) {
				return false
			}
		}
	}
	cl := p.header.Values("Content-Length")
	switch {
	case len(cl) == 0:
		return true
	case len(cl) > 1:
		return false
	}
	n, err := strconv.ParseInt(cl[0], 10, 64)
	return err != nil || n < 0 || n == int64(len(p.body))
}

// manifestTyped reports whether the reply says it is a manifest: its
// Content-Type is a manifest's, and its body declares no other type.
func (p *peerReply) manifestTyped() bool {
	var own struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if json.Unmarshal(p.body, &own) == nil && own.MediaType != "" && !isManifestType(own.MediaType) {
		return false
	}
	return isManifestType(types.MediaType(mediaTypeOf(p.header.Get("Content-Type")))) && len(p.body) <= maxManifestSize
}

// The requests FuzzPeerResponse makes of the node; the peers are asked
// for what it lacks.
const (
	peerAskBlob         = iota // a blob the good peer has
	peerAskManifest            // a manifest the good peer has, by digest
	peerAskTag                 // a tag the good peer has
	peerAskBodyBlob            // the fuzzed body, as a blob by its digest
	peerAskBodyManifest        // the fuzzed body, as a manifest by its digest
	peerAskOtherTag            // a tag only the fuzzed peer may have
	peerAskReferrers           // the referrers of a manifest the good peer has
	peerAskKinds               // kind/peerAskKinds odd: the request is a HEAD
)

// FuzzPeerResponse: a node with an empty cache asks two peers for what it
// is asked: first a peer answering every request with the fuzzed status,
// header and body, then a good peer (a registry of fuzzLayout). Whatever
// the first peer says, the node answers no 5xx; it serves only content
// that matches its digest — the digest asked for, or for a tag the one of
// the first peer's body or the good peer's manifest — and serves what the
// good peer has; it serves the first peer's body when that is a plain 200
// of the digest asked for (and, for a manifest, a manifest media type);
// its cache holds only blobs that match their names, and nothing left in
// its temporary directory; and Fetcher.Manifest returns only the bytes
// of the digest it asks for.
func FuzzPeerResponse(f *testing.F) {
	l := newFuzzLayout(f)
	oci := l.good[l.ociImage].raw
	blob := []byte("a blob only the fuzzed peer has")
	for _, s := range []struct {
		kind   uint8
		status int
		header string
		body   []byte
	}{
		{peerAskBlob, 200, "Content-Type: application/octet-stream\nDocker-Content-Digest: " + peerBodyDigest, blob},
		{peerAskManifest, 404, "Content-Type: application/json", []byte(`{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`)},
		{peerAskTag, 200, "Content-Type: " + string(types.OCIManifestSchema1) + "\nDocker-Content-Digest: " + peerBodyDigest, oci},
		{peerAskTag, 200, "Content-Type: " + string(types.OCIManifestSchema1) + "\nDocker-Content-Digest: " + l.index.String(), oci},
		{peerAskBodyBlob, 200, "Content-Length: " + peerBodySize, blob},
		{peerAskBodyBlob, 200, "Content-Length: 5", blob},
		{peerAskBodyBlob, 500, "", blob},
		{peerAskBodyManifest, 200, "Content-Type: " + string(types.OCIManifestSchema1), []byte(`{"schemaVersion":2,"config":{}}`)},
		{peerAskBodyManifest, 200, "Content-Type: text/plain", []byte(`{"schemaVersion":2,"manifests":[]}`)},
		{peerAskBodyManifest, 200, "Content-Type: text/plain", []byte(`not a manifest`)},
		{peerAskOtherTag, 200, "Content-Type: " + string(types.DockerManifestSchema2) + "\nDocker-Content-Digest: " + peerBodyDigest, l.good[l.dockerImage].raw},
		{peerAskOtherTag, 200, "Docker-Content-Digest: sha256:1234", l.good[l.dockerImage].raw},
		{peerAskOtherTag, 200, "Content-Encoding: gzip", []byte("\x1f\x8b")},
		{peerAskReferrers, 200, "Content-Type: " + string(types.OCIImageIndex), []byte(`{"schemaVersion":2,"manifests":[{"mediaType":"` +
			string(types.OCIManifestSchema1) + `","digest":"` + l.referrer.String() + `","size":1},{"mediaType":"` +
			string(types.OCIManifestSchema1) + `","digest":"` + l.index.String() + `","size":10}]}`)},
		{peerAskReferrers + peerAskKinds, 200, "Content-Type: " + string(types.OCIImageIndex), []byte(`{"manifests":null}`)},
	} {
		f.Add(s.kind, s.status, s.header, s.body)
	}

	discard := slog.New(slog.DiscardHandler)
	layout, err := OpenLayout(l.dir, WithLogger(discard))
	require.NoError(f, err)
	goodSrv, err := New(WithStores(layout), WithLogger(discard))
	require.NoError(f, err)
	good := httptest.NewServer(goodSrv)
	f.Cleanup(good.Close)
	var reply atomic.Pointer[peerReply]
	fuzzed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p := reply.Load()
		for k, vs := range p.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(p.status)
		_, _ = w.Write(p.body)
	}))
	f.Cleanup(fuzzed.Close)
	peers := []string{fuzzed.URL, good.URL}
	// One client for every run, as a node keeps one: a run's connections
	// are the next run's.
	var bases []*url.URL
	for _, p := range peers {
		u, err := url.Parse(p)
		require.NoError(f, err)
		bases = append(bases, u)
	}
	client := newPeerClient(bases, nil)
	f.Cleanup(client.client.CloseIdleConnections)
	fetcher, err := NewFetcher(peers, nil)
	require.NoError(f, err)
	f.Cleanup(fetcher.CloseIdleConnections)

	f.Fuzz(func(t *testing.T, kind uint8, status int, header string, body []byte) {
		p := newPeerReply(t, status, header, body)
		reply.Store(p)
		cache, err := OpenCache(emptyCacheDir(t), WithLogger(discard))
		require.NoError(t, err)
		s, err := New(WithCache(cache), WithPeers(peers, nil), WithLogger(discard))
		require.NoError(t, err)
		s.peers = client

		var path string
		switch kind % peerAskKinds {
		case peerAskBlob:
			path = "/v2/team/app/blobs/" + l.layer.String()
		case peerAskManifest:
			path = "/v2/team/app/manifests/" + l.ociImage.String()
		case peerAskTag:
			path = "/v2/team/app/manifests/1"
		case peerAskBodyBlob:
			path = "/v2/team/app/blobs/" + p.digest.String()
		case peerAskBodyManifest:
			path = "/v2/team/app/manifests/" + p.digest.String()
		case peerAskOtherTag:
			path = "/v2/team/app/manifests/other"
		case peerAskReferrers:
			path = "/v2/team/app/referrers/" + l.ociImage.String()
		}
		method := http.MethodGet
		if kind/peerAskKinds%2 == 1 {
			method = http.MethodHead
		}
		req := httptest.NewRequest(method, path+"?ns=quay.io", nil)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		res, got := rec.Result(), rec.Body.Bytes()

		if res.StatusCode >= 500 {
			t.Fatalf("%s %s: status %d: %s", method, path, res.StatusCode, got)
		}
		if res.StatusCode >= 400 {
			wantRegistryError(t, res, got, res.StatusCode)
		}
		rt, ok := parseRoute(req.URL.Path)
		require.True(t, ok)
		switch kind % peerAskKinds {
		case peerAskBlob, peerAskManifest:
			require.Equal(t, http.StatusOK, res.StatusCode, "the good peer has %s", path)
		case peerAskTag:
			require.Equal(t, http.StatusOK, res.StatusCode, "the good peer has %s", path)
			served := res.Header.Get("Docker-Content-Digest")
			if p.plain() && p.manifestTyped() && docDigestIs(p, p.digest) {
				// The first peer is asked first.
				require.Equal(t, p.digest.String(), served, "the first peer's manifest")
			} else if served != p.digest.String() {
				require.Equal(t, l.ociImage.String(), served, "the good peer's manifest")
			}
		case peerAskBodyBlob:
			if p.plain() {
				require.Equal(t, http.StatusOK, res.StatusCode, "a plain 200 of the blob's bytes")
			}
		case peerAskBodyManifest:
			if p.plain() && p.manifestTyped() {
				require.Equal(t, http.StatusOK, res.StatusCode, "a plain 200 of the manifest's bytes")
			}
		case peerAskOtherTag:
			if p.plain() && p.manifestTyped() && docDigestIs(p, p.digest) {
				require.Equal(t, http.StatusOK, res.StatusCode, "a plain 200 of a manifest")
			}
		case peerAskReferrers:
			require.Equal(t, http.StatusOK, res.StatusCode)
			checkPeerReferrers(t, l, p, cache, got, method == http.MethodHead)
		}
		if res.StatusCode == http.StatusOK && rt.kind != routeReferrers {
			d, err := v1.NewHash(res.Header.Get("Docker-Content-Digest"))
			require.NoError(t, err, "served without a digest")
			if rt.kind == routeBlob || isDigestRef(rt.ref) {
				require.Equal(t, rt.ref, d.String(), "served another digest than asked")
			}
			content := l.good[d].raw
			if d == p.digest {
				content = p.body
			}
			require.NotNil(t, content, "served %s, neither good content nor the peer's body", d)
			require.Equal(t, strconv.Itoa(len(content)), res.Header.Get("Content-Length"))
			if method == http.MethodGet && !bytes.Equal(got, content) {
				t.Fatalf("served %d bytes as %s, not its content", len(got), d)
			}
			if rt.kind == routeManifest {
				ct := types.MediaType(res.Header.Get("Content-Type"))
				if !isManifestType(ct) {
					t.Fatalf("served a manifest as %q", ct)
				}
				var own struct {
					MediaType types.MediaType `json:"mediaType"`
				}
				if json.Unmarshal(content, &own) == nil && isManifestType(own.MediaType) && own.MediaType != ct {
					t.Fatalf("served a manifest whose mediaType is %q as %q", own.MediaType, ct)
				}
			}
		}
		checkCacheIntact(t, cache.Dir())

		if k := kind % peerAskKinds; k == peerAskManifest || k == peerAskBodyManifest {
			d := l.ociImage
			if k == peerAskBodyManifest {
				d = p.digest
			}
			raw, from, err := fetcher.Manifest(context.Background(), "quay.io/team/app", d)
			if k == peerAskManifest {
				require.NoError(t, err, "the good peer has %s", d)
			}
			if err == nil {
				got, _, herr := v1.SHA256(bytes.NewReader(raw))
				require.NoError(t, herr)
				require.Equal(t, d, got, "Fetcher.Manifest returned bytes of another digest, from %s", from)
				require.True(t, slices.Contains(peers, from))
			}
		}
	})
}

// emptyCacheDir is a directory holding an empty cache, written without
// the syncs OpenCache makes when it writes one: they were most of a run.
func emptyCacheDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "cache")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(layoutMarker), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644))
	return dir
}

// docDigestIs reports whether the reply's Docker-Content-Digest, if any,
// is d.
func docDigestIs(p *peerReply, d v1.Hash) bool {
	v := p.header.Values("Docker-Content-Digest")
	return len(v) == 0 || v[0] == d.String()
}

// checkPeerReferrers checks the referrers of the OCI image the node lists
// after asking the peers: the good peer's referrer among them, and only
// manifests in the cache whose subject is the image.
func checkPeerReferrers(t *testing.T, l *fuzzLayout, p *peerReply, cache *Cache, body []byte, head bool) {
	t.Helper()
	if head {
		return
	}
	var idx v1.IndexManifest
	require.NoError(t, json.Unmarshal(body, &idx))
	listed := false
	for _, d := range idx.Manifests {
		listed = listed || d.Digest == l.referrer
		raw := l.good[d.Digest].raw
		if d.Digest == p.digest {
			raw = p.body
		}
		require.NotNil(t, raw, "listed %s, neither good content nor the peer's body", d.Digest)
		require.True(t, cache.Has(d.Digest), "listed %s, which is not in the cache", d.Digest)
		var m struct {
			Subject *v1.Descriptor `json:"subject"`
		}
		require.NoError(t, json.Unmarshal(raw, &m))
		if m.Subject == nil || m.Subject.Digest != l.ociImage {
			t.Fatalf("listed %s, which is no referrer of %s", d.Digest, l.ociImage)
		}
	}
	require.True(t, listed, "the good peer's referrer is not listed")
}

// checkCacheIntact checks that every blob of the cache in dir matches its
// name and that no temporary file is left.
func checkCacheIntact(t *testing.T, dir string) {
	t.Helper()
	blobs := filepath.Join(dir, "blobs", "sha256")
	ents, err := os.ReadDir(blobs)
	require.NoError(t, err)
	for _, e := range ents {
		f, err := os.Open(filepath.Join(blobs, e.Name()))
		require.NoError(t, err)
		d, _, err := v1.SHA256(f)
		_ = f.Close() // read only
		require.NoError(t, err)
		if d.Hex != e.Name() {
			t.Fatalf("the cache holds %s, which is %s", e.Name(), d)
		}
	}
	tmp, err := os.ReadDir(filepath.Join(dir, ".tmp"))
	require.NoError(t, err)
	if len(tmp) != 0 {
		t.Fatalf("left in the cache's .tmp: %v", tmp)
	}
	var idx v1.IndexManifest
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &idx))
	for _, e := range idx.Manifests {
		if _, err := os.Stat(filepath.Join(blobs, e.Digest.Hex)); err != nil {
			t.Fatalf("index.json names %s, which the cache does not hold: %v", e.Digest, err)
		}
	}
}

// TestPeerManifestKeepsItsOwnMediaType: a manifest a peer sends under
// another manifest media type than its own mediaType field is kept and
// served under its own (FuzzPeerResponse's
// testdata/fuzz/FuzzPeerResponse/manifest-typed-as-index): served under the
// peer's, containerd refuses it, and the cache recorded it so for good.
func TestPeerManifestKeepsItsOwnMediaType(t *testing.T) {
	raw := []byte(`{"schemaVersion":2,"mediaType":"` + string(types.OCIManifestSchema1) + `","config":{"mediaType":"` +
		string(types.OCIConfigJSON) + `","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}`)
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	require.NoError(t, err)
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", string(types.OCIImageIndex))
		_, _ = w.Write(raw)
	}))
	t.Cleanup(peer.Close)
	cache := openCache(t)
	srv, _, _ := startServer(t, WithCache(cache), WithPeers([]string{peer.URL}, nil))

	for _, ref := range []string{"1.0", d.String()} {
		resp, body := do(t, http.MethodGet, srv.URL+"/v2/quay.io/team/app/manifests/"+ref, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		require.Equal(t, raw, body)
		require.Equal(t, string(types.OCIManifestSchema1), resp.Header.Get("Content-Type"), ref)
	}
	desc, err := cache.Resolve(context.Background(), "quay.io/team/app", "1.0")
	require.NoError(t, err)
	require.Equal(t, types.OCIManifestSchema1, desc.MediaType, "the cache records the manifest's own media type")
}
