package registry

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bigBlobServer serves a layout holding an image whose one layer has
// more than streamMin bytes, and returns the layer's path and URL.
func bigBlobServer(t *testing.T) (s *Server, logs *lockedBuffer, path, url string, size int64) {
	t.Helper()
	return bigBlobServerWith(t, WithStores)
}

// bigLayerLayout writes an OCI layout holding toolsRef, an image of one
// layer bigger than streamMin, and returns its directory, the layer's
// blob's path and its digest.
func bigLayerLayout(t *testing.T) (dir, path string, d v1.Hash) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "layout")
	img := ociImage(t, "amd64", 1, streamMin+12345)
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(refAnnotations(toolsRef))))
	path, d = layerPath(t, dir, img)
	return dir, path, d
}

// bigBlobServerWith is bigBlobServer with the layout added by stores
// (WithStores or WithReaderCheckedStores).
func bigBlobServerWith(t *testing.T, stores func(...Store) Option) (s *Server, logs *lockedBuffer, path, url string, size int64) {
	t.Helper()
	dir, path, d := bigLayerLayout(t)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, fi.Size(), int64(streamMin))
	st, err := OpenLayout(dir)
	require.NoError(t, err)
	hs, s, logs := startServer(t, stores(st))
	return s, logs, path, hs.URL + "/v2/ghcr.io/acme/tools/blobs/" + d.String(), fi.Size()
}

// getWhole GETs url and reads the body to its end: what it read, and the
// read's error.
func getWhole(t *testing.T, url string, header http.Header) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// A big blob's first whole GET is answered at once and hashed as it is
// sent: the client gets it whole, with its digest, and it is hashed once
// for every later request, a range too.
func TestBigBlobIsHashedAsItIsServed(t *testing.T) {
	s, _, path, url, size := bigBlobServer(t)
	want, err := os.ReadFile(path)
	require.NoError(t, err)

	for i := range 2 {
		resp, body, err := getWhole(t, url, nil)
		require.NoError(t, err, "request %d", i)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, size, resp.ContentLength)
		assert.Equal(t, want, body, "request %d: the blob whole", i)
		assert.Equal(t, fmt.Sprintf("sha256:%x", sha256.Sum256(body)), resp.Header.Get("Docker-Content-Digest"))
	}
	resp, body, err := getWhole(t, url, http.Header{"Range": {"bytes=10-19"}})
	require.NoError(t, err)
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, want[10:20], body)
	st := s.Stats()
	assert.Equal(t, int64(1), st.Verifications, "hashed once, while first served")
	assert.Equal(t, size, st.VerifiedBytes)
	assert.Zero(t, st.Mismatches)
}

// A big blob that does not match its digest is never sent whole: the
// first GET's connection is cut before its last byte, and later requests
// are refused as for a small corrupt blob, without hashing it again.
func TestCorruptBigBlobIsCutShort(t *testing.T) {
	s, logs, path, url, size := bigBlobServer(t)
	corrupt(t, path)

	resp, body, err := getWhole(t, url, nil)
	require.Error(t, err, "the body ends early")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the headers went out before the hash was known")
	assert.Less(t, int64(len(body)), size)

	resp, body, err = getWhole(t, url, nil)
	require.NoError(t, err)
	e := wantError(t, resp, body, http.StatusNotFound, codeBlobUnknown)
	assert.Equal(t, mismatchDetail, e.Detail)
	st := s.Stats()
	assert.Equal(t, int64(1), st.Verifications, "hashed once")
	assert.Equal(t, int64(1), st.Mismatches)
	assert.Equal(t, 1, strings.Count(logs.String(), "content does not match its digest; not serving it"))
	assert.Contains(t, logs.String(), path)
}

// A range GET and a HEAD of a big blob not hashed yet hash it first, as
// for any blob: only a whole GET can be cut short.
func TestBigBlobRangeAndHeadAreHashedFirst(t *testing.T) {
	s, _, path, url, _ := bigBlobServer(t)
	corrupt(t, path)
	resp, body, err := getWhole(t, url, http.Header{"Range": {"bytes=0-9"}})
	require.NoError(t, err)
	wantError(t, resp, body, http.StatusNotFound, codeBlobUnknown)
	assert.Equal(t, int64(1), s.Stats().Mismatches)

	s, _, _, url, size := bigBlobServer(t)
	resp, body = do(t, http.MethodHead, url, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, size, resp.ContentLength)
	assert.Empty(t, body)
	assert.Equal(t, int64(1), s.Stats().Verifications, "hashed before the HEAD was answered")
	_, body, err = getWhole(t, url, nil)
	require.NoError(t, err)
	assert.Equal(t, size, int64(len(body)))
	assert.Equal(t, int64(1), s.Stats().Verifications, "and not again for the GET")
}

// Whole GETs of a big blob at the same time share one hash: the first
// streams it, the others wait for its outcome and are then served it.
func TestConcurrentFirstGetsOfABigBlobShareOneHash(t *testing.T) {
	s, _, path, url, _ := bigBlobServer(t)
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	bodies := make([][]byte, 4)
	errs := make([]error, 4)
	for i := range bodies {
		wg.Go(func() { _, bodies[i], errs[i] = getWhole(t, url, nil) })
	}
	wg.Wait()
	for i := range bodies {
		require.NoError(t, errs[i])
		assert.Equal(t, want, bodies[i], "request %d", i)
	}
	assert.Equal(t, int64(1), s.Stats().Verifications)
}

// A corrupt big blob in the first of two stores cuts the first GET short;
// the client's retry is served the second store's intact copy.
func TestCorruptBigBlobRetryIsServedFromTheNextStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	img := ociImage(t, "amd64", 1, streamMin+1)
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(refAnnotations(toolsRef))))
	copyDir := filepath.Join(t.TempDir(), "copy")
	out, err := exec.Command("cp", "-a", dir, copyDir).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	first, err := OpenLayout(dir)
	require.NoError(t, err)
	second, err := OpenLayout(copyDir)
	require.NoError(t, err)
	hs, _, _ := startServer(t, WithStores(first, second))
	path, d := layerPath(t, dir, img)
	corrupt(t, path)
	want, err := os.ReadFile(filepath.Join(copyDir, "blobs", "sha256", d.Hex))
	require.NoError(t, err)
	url := hs.URL + "/v2/x/blobs/" + d.String()

	_, _, err = getWhole(t, url, nil)
	require.Error(t, err, "the corrupt copy is cut short")
	resp, body, err := getWhole(t, url, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, want, body)
}

// A store whose readers check its content (the upgrade share) is served
// as it is on disk: nothing is hashed, for a whole GET or a range, and a
// corrupt blob goes out whole for its reader to refuse.
func TestReaderCheckedStoreIsServedUnhashed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool
	}{{"intact", false}, {"corrupt", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, path, url, size := bigBlobServerWith(t, WithReaderCheckedStores)
			if tc.corrupt {
				corrupt(t, path)
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)

			resp, body, err := getWhole(t, url, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, size, resp.ContentLength)
			assert.Equal(t, want, body, "the blob as it is on disk")
			resp, body, err = getWhole(t, url, http.Header{"Range": {"bytes=10-19"}})
			require.NoError(t, err)
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			assert.Equal(t, want[10:20], body)
			st := s.Stats()
			assert.Zero(t, st.Verifications, "nothing hashed")
			assert.Zero(t, st.VerifiedBytes)
			assert.Zero(t, st.Mismatches)
		})
	}
}

// WithReaderCheckedStores refuses a nil store, as WithStores does.
func TestReaderCheckedStoresRefuseNil(t *testing.T) {
	_, err := New(WithReaderCheckedStores(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WithReaderCheckedStores")
}
