package registry

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// endless writes until the client goes away, with no Content-Length.
func endless(w http.ResponseWriter) {
	buf := bytes.Repeat([]byte{'x'}, 32<<10)
	for {
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
}

// raw answers with a Content-Length of its own choosing and the body it
// is given, whatever their lengths: a lying peer (net/http's server would
// correct it).
func raw(w http.ResponseWriter, contentLength int, body []byte) {
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", contentLength)
	_, _ = rw.Write(body)
	_ = rw.Flush()
}

// tmpFS reports as free what the budget leaves beside the files being
// written into the cache's .tmp directory: a disk that fills as a blob
// is written.
type tmpFS struct {
	dir    string
	budget uint64
}

func (f tmpFS) Space(string) (diskspace.Space, error) {
	var used uint64
	err := filepath.WalkDir(f.dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			used += uint64(info.Size()) //nolint:gosec // a size is positive
		}
		return nil
	})
	if used > f.budget {
		return diskspace.Space{Total: f.budget}, err
	}
	return diskspace.Space{Avail: f.budget - used, Total: f.budget}, err
}

// TestPeerBlobIsBounded: a blob from a peer is read to exactly the size a
// cached manifest gives it, or, when no manifest lists it, to at most the
// server's limit, and never past the free space beside the reserve;
// whatever a peer sends beyond, or short of, that is refused by peer,
// digest and what was wrong, and nothing is kept.
func TestPeerBlobIsBounded(t *testing.T) {
	img := ociImage(t, "amd64", 1, 4096)
	layers, err := img.Layers()
	require.NoError(t, err)
	layer, err := layers[0].Compressed()
	require.NoError(t, err)
	var content bytes.Buffer
	_, err = content.ReadFrom(layer)
	require.NoError(t, err)
	blob := content.Bytes()
	d := digestOf(t, layers[0])
	size := len(blob)

	for _, tc := range []struct {
		name  string
		known bool  // a manifest in the cache lists the blob
		limit int64 // WithPeerBlobLimit; 0: the default
		// space, when set, is the cache's file system, given the cache's
		// directory, and reserve what it keeps free.
		space   func(dir string) diskspace.FS
		reserve uint64
		serve   func(w http.ResponseWriter)
		want    []string // parts of the error; none: fetched
		is      error
		asked   bool // the peer is asked at all
	}{{
		name: "the blob, its size known", known: true, asked: true,
		serve: func(w http.ResponseWriter) { _, _ = w.Write(blob) },
	}, {
		name: "the blob, its size unknown, no Content-Length", asked: true,
		serve: func(w http.ResponseWriter) {
			_, _ = w.Write(blob[:10])
			w.(http.Flusher).Flush() // chunked: no Content-Length
			_, _ = w.Write(blob[10:])
		},
	}, {
		name: "no Content-Length and an endless body, size unknown", asked: true,
		limit: 1 << 20, serve: endless, is: ErrPeerBlobTooLarge,
		want: []string{"the peer sent more than 1.0 MiB with no Content-Length, and no manifest in this node's cache gives the blob's size"},
	}, {
		name: "no Content-Length and an endless body, size known", known: true, asked: true,
		serve: endless, is: ErrDigestMismatch,
		want: []string{fmt.Sprintf("the body is longer than the %d bytes the manifest's descriptor gives it", size)},
	}, {
		name: "an endless body fills the disk, size unknown", asked: true,
		space: func(dir string) diskspace.FS { return tmpFS{dir: dir, budget: 100 << 20} },
		serve: endless, is: diskspace.ErrNoSpace,
		want: []string{"writing the next part of it into the cache (its size is not known) needs 64.0 MiB on ", "which has 36.0 MiB free"},
	}, {
		name: "Content-Length lying: fewer bytes than the descriptor", known: true, asked: true,
		serve: func(w http.ResponseWriter) { raw(w, 10, blob) }, is: ErrDigestMismatch,
		want: []string{fmt.Sprintf("the peer says 10 bytes (Content-Length), the manifest's descriptor says %d", size)},
	}, {
		name: "Content-Length lying: more bytes than the limit, size unknown", asked: true,
		limit: 1 << 20, serve: func(w http.ResponseWriter) { raw(w, 1<<40, blob) }, is: ErrPeerBlobTooLarge,
		want: []string{"the peer says 1099511627776 bytes (Content-Length), more than 1.0 MiB, and no manifest in this node's cache gives the blob's size"},
	}, {
		name: "Content-Length lying: the body is cut short", asked: true,
		serve: func(w http.ResponseWriter) { raw(w, size, blob[:100]) },
		want:  []string{"reading the body after 100 bytes: unexpected EOF"},
	}, {
		name: "a body longer than the descriptor, no Content-Length", known: true, asked: true,
		serve: func(w http.ResponseWriter) {
			w.(http.Flusher).Flush()
			_, _ = w.Write(append(append([]byte{}, blob...), "more"...))
		},
		is:   ErrDigestMismatch,
		want: []string{fmt.Sprintf("the body is longer than the %d bytes the manifest's descriptor gives it", size)},
	}, {
		name: "a body longer than the descriptor, with its Content-Length", known: true, asked: true,
		serve: func(w http.ResponseWriter) { raw(w, size+4, append(append([]byte{}, blob...), "more"...)) },
		is:    ErrDigestMismatch,
		want:  []string{fmt.Sprintf("the peer says %d bytes (Content-Length), the manifest's descriptor says %d", size+4, size)},
	}, {
		name: "a body shorter than the descriptor, no Content-Length", known: true, asked: true,
		serve: func(w http.ResponseWriter) { w.(http.Flusher).Flush(); _, _ = w.Write(blob[:100]) },
		is:    ErrDigestMismatch,
		want:  []string{fmt.Sprintf("the body ended after 100 of the %d bytes the manifest's descriptor gives it", size)},
	}, {
		name: "the size known, no room for it beside the reserve", known: true,
		space:   func(string) diskspace.FS { return diskspace.Fixed{Avail: 1 << 20} },
		reserve: 1<<20 - 1024,
		serve:   func(w http.ResponseWriter) { _, _ = w.Write(blob) }, is: diskspace.ErrNoSpace,
		want: []string{fmt.Sprintf("writing it into the cache needs %s on ", diskspace.Size(uint64(size))), "which has 1.0 MiB free and keeps 1023.0 KiB of it for etcd"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var asked atomic.Bool
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasSuffix(r.URL.Path, "/blobs/"+d.String()) {
					http.NotFound(w, r)
					return
				}
				asked.Store(true)
				tc.serve(w)
			}))
			defer peer.Close()
			c := openCache(t)
			if tc.known {
				_, err := c.AddImage(ctx, appQuay, img)
				require.NoError(t, err)
				require.NoError(t, c.remove(d))
			}
			opts := []Option{WithCache(c), WithPeers([]string{peer.URL}, nil)}
			if tc.space != nil {
				opts = append(opts, WithPeerSpace(tc.space(c.Dir()), tc.reserve))
			}
			if tc.limit != 0 {
				opts = append(opts, WithPeerBlobLimit(tc.limit))
			}
			srv, s, _ := startServer(t, opts...)

			err := s.pullBlob(ctx, "team/app", "quay.io", d)
			assert.Equal(t, tc.asked, asked.Load(), "whether the peer was asked")
			if tc.want == nil {
				require.NoError(t, err)
				assert.True(t, c.Has(d))
				return
			}
			require.Error(t, err)
			t.Log(err)
			host := strings.TrimPrefix(peer.URL, "http://")
			assert.ErrorContains(t, err, "peer "+host+": blob "+d.String()+": ", "the error names the peer and the digest")
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
			assert.False(t, c.Has(d), "nothing is kept")
			tmp, err := os.ReadDir(filepath.Join(c.Dir(), ".tmp"))
			require.NoError(t, err)
			assert.Empty(t, tmp, "no temporary file is left")

			// A client is told the blob is unknown, and the registry keeps
			// serving.
			u, _ := url.Parse(srv.URL + "/v2/team/app/blobs/" + d.String() + "?ns=quay.io")
			resp, body := do(t, http.MethodGet, u.String(), nil)
			wantError(t, resp, body, http.StatusNotFound, codeBlobUnknown)
		})
	}
}

// A blob a cached manifest lists has its descriptor's size; one listed by
// an index too; one nothing lists has none.
func TestCacheBlobSize(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	img := ociImage(t, "amd64", 1, 4096)
	_, err := c.AddImage(ctx, appQuay, img)
	require.NoError(t, err)
	layers, err := img.Layers()
	require.NoError(t, err)
	size, err := layers[0].Size()
	require.NoError(t, err)
	assert.Equal(t, size, c.blobSize("quay.io/team/app", digestOf(t, layers[0])))
	cfg, err := img.RawConfigFile()
	require.NoError(t, err)
	assert.Equal(t, int64(len(cfg)), c.blobSize("quay.io/team/app", configDigest(t, img)))
	assert.Equal(t, int64(len(rawOf(t, img))), c.blobSize("quay.io/team/app", digestOf(t, img)))
	assert.Equal(t, int64(-1), c.blobSize("quay.io/team/app", v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}))
	assert.Equal(t, int64(-1), c.blobSize("quay.io/other/app", digestOf(t, layers[0])), "another repository's manifests are not asked")
}
