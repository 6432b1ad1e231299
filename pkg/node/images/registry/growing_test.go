package registry

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// growingServer serves a live layout whose big layer's blob is growing:
// only its first n bytes written, under its growing name. It returns
// the blob's bytes, its growing and final paths, and its URL.
func growingServer(t *testing.T, n int) (want []byte, grow, final, url string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	img := ociImage(t, "amd64", 1, streamMin+12345)
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(refAnnotations(toolsRef))))
	final, d := layerPath(t, dir, img)
	want, err = os.ReadFile(final)
	require.NoError(t, err)
	require.NoError(t, os.Remove(final))
	grow = filepath.Join(filepath.Dir(final), GrowingName(d.Hex, int64(len(want))))
	require.NoError(t, os.WriteFile(grow, want[:n], 0o644))
	hs, _, _ := startServer(t, WithReaderCheckedStores(OpenLiveLayout(dir)))
	return want, grow, final, hs.URL + "/v2/ghcr.io/acme/tools/blobs/" + d.String()
}

// appendTo appends b to the file at path.
func appendTo(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestGrowingBlobIsServedAsItGrows: a GET of a blob its writer is still
// writing gets it whole, with its size, as the writer writes it and
// renames it into place.
func TestGrowingBlobIsServedAsItGrows(t *testing.T) {
	want, grow, final, url := growingServer(t, 1000)
	type got struct {
		resp *http.Response
		body []byte
		err  error
	}
	done := make(chan got, 1)
	go func() {
		resp, body, err := getWhole(t, url, nil)
		done <- got{resp, body, err}
	}()
	for off := 1000; off < len(want); off += 40000 {
		time.Sleep(20 * time.Millisecond)
		appendTo(t, grow, want[off:min(off+40000, len(want))])
	}
	require.NoError(t, os.Rename(grow, final))
	g := <-done
	require.NoError(t, g.err)
	require.Equal(t, http.StatusOK, g.resp.StatusCode)
	assert.Equal(t, int64(len(want)), g.resp.ContentLength)
	assert.Equal(t, want, g.body)

	resp, body, err := getWhole(t, url, http.Header{"Range": {"bytes=10-19"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, want[10:20], body, "the blob, whole now")
}

// TestGrowingBlobWhoseWriterGivesUp: a reader gets an error, never a
// short blob that looks whole.
func TestGrowingBlobWhoseWriterGivesUp(t *testing.T) {
	want, grow, _, url := growingServer(t, 1000)
	done := make(chan error, 1)
	var body []byte
	go func() {
		var err error
		_, body, err = getWhole(t, url, nil)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, os.Remove(grow))
	err := <-done
	require.Error(t, err, "the response ends short of its length")
	assert.Equal(t, want[:len(body)], body)
	assert.Less(t, len(body), len(want))
}

// TestGrowingBodyStalls: a writer that writes nothing for the stall time
// fails the read.
func TestGrowingBodyStalls(t *testing.T) {
	dir := t.TempDir()
	grow := filepath.Join(dir, GrowingName("ab", 10))
	require.NoError(t, os.WriteFile(grow, []byte("12345"), 0o644))
	f, err := os.Open(grow)
	require.NoError(t, err)
	defer f.Close()
	slept := time.Duration(0)
	g := &growingBody{f: f, grow: grow, final: filepath.Join(dir, "ab"), size: 10, poll: time.Second, stall: 5 * time.Second,
		sleep: func(_ context.Context, d time.Duration) error { slept += d; return nil }, ctx: context.Background()}
	buf := make([]byte, 10)
	n, err := g.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "12345", string(buf[:n]))
	_, err = g.Read(buf)
	require.ErrorContains(t, err, "its writer wrote nothing for 5s, at byte 5 of 10")
	assert.Equal(t, 5*time.Second, slept)
	end, err := g.Seek(0, 2)
	require.NoError(t, err)
	assert.Equal(t, int64(10), end, "its whole size")
}
