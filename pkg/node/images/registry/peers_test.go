package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// peerA serves the fixture over TLS, like a control-plane node.
func peerA(t *testing.T, f *fixture) (*httptest.Server, *tls.Config) {
	t.Helper()
	st, err := OpenLayout(f.dir)
	must(t, err)
	log, _ := testLogger(t)
	a, err := New(WithStores(st), WithLogger(log))
	must(t, err)
	srv := httptest.NewTLSServer(a)
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func pullIndex(t *testing.T, ref string) error {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	must(t, err)
	idx, err := remote.Index(r, remote.WithContext(context.Background()))
	if err != nil {
		return err
	}
	return validate.Index(idx)
}

func pullImage(t *testing.T, ref string) error {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	must(t, err)
	img, err := remote.Image(r, remote.WithContext(context.Background()))
	if err != nil {
		return err
	}
	return validate.Image(img)
}

func TestPullThroughPeer(t *testing.T) {
	f := newFixture(t)
	a, tlsConfig := peerA(t, f)
	c := openCache(t)
	b, bs, _ := startServer(t, WithCache(c), WithPeers([]string{a.URL}, tlsConfig))
	host := strings.TrimPrefix(b.URL, "http://")

	must(t, pullIndex(t, host+"/"+pauseRef))
	must(t, pullImage(t, host+"/library/hello:1.0"))
	if bs.Stats().PeerFetches == 0 {
		t.Fatal("nothing was fetched from the peer")
	}
	// Everything the pulls needed is now in B's cache directory.
	for _, img := range []v1.Image{f.pauseAMD64, f.pauseARM64, f.hello} {
		ls, err := img.Layers()
		must(t, err)
		for _, l := range ls {
			d, err := l.Digest()
			must(t, err)
			if !c.Has(d) {
				t.Fatalf("layer %s is not in the cache", d)
			}
		}
		if !c.Has(digestOf(t, img)) {
			t.Fatalf("manifest %s is not in the cache", digestOf(t, img))
		}
	}

	a.Close()
	must(t, pullIndex(t, host+"/"+pauseRef))
	must(t, pullImage(t, host+"/library/hello:1.0"))
	resp, _ := do(t, http.MethodGet, b.URL+"/v2/pause/manifests/3.10?ns=registry.k8s.io", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("by ns after the peer stopped: %d", resp.StatusCode)
	}

	// The cache survives a restart, without peers.
	c2, err := OpenCache(c.Dir())
	must(t, err)
	d, _, _ := startServer(t, WithCache(c2))
	must(t, pullIndex(t, strings.TrimPrefix(d.URL, "http://")+"/"+pauseRef))
}

// corrupting wraps a handler and flips a byte in bodies whose path matches.
func corrupting(h http.Handler, pathPart string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if strings.Contains(r.URL.Path, pathPart) && rec.Code == http.StatusOK && len(body) > 0 {
			body[len(body)/2] ^= 0xff
		}
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
}

func TestPeerCorruptContentRejected(t *testing.T) {
	f := newFixture(t)
	st, err := OpenLayout(f.dir)
	must(t, err)
	good, err := New(WithStores(st))
	must(t, err)
	for _, tc := range []struct {
		name, part, path, code string
	}{
		{"blob", "/blobs/", "", codeBlobUnknown},
		{"manifest by tag", "/manifests/", "/v2/pause/manifests/3.10?ns=registry.k8s.io", codeManifestUnknown},
		{"manifest by digest", "/manifests/", "/v2/pause/manifests/" + digestOf(t, f.pause).String() + "?ns=registry.k8s.io", codeManifestUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evil := httptest.NewTLSServer(corrupting(good, tc.part))
			defer evil.Close()
			pool := x509.NewCertPool()
			pool.AddCert(evil.Certificate())
			c := openCache(t)
			b, _, logs := startServer(t, WithCache(c), WithPeers([]string{evil.URL}, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
			path := tc.path
			var d v1.Hash
			if path == "" {
				_, d = layerPath(t, f.dir, f.tools)
				path = "/v2/ghcr.io/acme/tools/blobs/" + d.String()
			}
			resp, body := do(t, http.MethodGet, b.URL+path, nil)
			wantError(t, resp, body, http.StatusNotFound, tc.code)
			if !strings.Contains(logs.String(), "does not match its digest; rejected") {
				t.Fatalf("rejection not logged:\n%s", logs)
			}
			if files := blobFiles(t, c.Dir()); len(files) != 0 {
				t.Fatalf("cache kept %v", files)
			}
			if repos, _ := c.Repositories(context.Background()); len(repos) != 0 {
				t.Fatalf("cache recorded %v", repos)
			}
		})
	}
}

// Two nodes that list each other as peers do not ask each other forever.
func TestPeersDoNotLoop(t *testing.T) {
	var hb, hc http.Handler
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hb.ServeHTTP(w, r) }))
	defer b.Close()
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hc.ServeHTTP(w, r) }))
	defer c.Close()
	sb, err := New(WithCache(openCache(t)), WithPeers([]string{c.URL}, nil))
	must(t, err)
	sc, err := New(WithCache(openCache(t)), WithPeers([]string{b.URL}, nil))
	must(t, err)
	hb, hc = sb, sc
	resp, body := do(t, http.MethodGet, b.URL+"/v2/pause/manifests/3.10?ns=registry.k8s.io", nil)
	wantError(t, resp, body, http.StatusNotFound, codeNameUnknown)
	if got := sc.Stats().PeerFetches; got != 0 {
		t.Fatalf("C fetched %d times", got)
	}
}

func TestNewOptions(t *testing.T) {
	if _, err := New(WithPeers([]string{"https://10.0.0.11:5443"}, nil)); err == nil {
		t.Fatal("peers without a cache accepted")
	}
	if _, err := New(WithCache(openCache(t)), WithPeers([]string{"10.0.0.11:5443"}, nil)); err == nil {
		t.Fatal("peer without scheme accepted")
	}
	if _, err := New(); err == nil {
		t.Fatal("no stores accepted")
	}
	if _, err := OpenCache(t.TempDir(), WithVerifiedLimit(3)); err == nil {
		t.Fatal("server option accepted by OpenCache")
	}
}
