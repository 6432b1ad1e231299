package registry

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// growing is a live layout served whose big layer's blob is growing: its
// writer (CreateGrowing) wrote only its first bytes.
type growing struct {
	want        []byte // the blob whole
	f           *os.File
	release     func()
	grow, final string
	url         string
}

// growingServer serves a live layout whose big layer's blob is growing,
// its first n bytes written.
func growingServer(t *testing.T, n int) *growing {
	t.Helper()
	dir, final, d := bigLayerLayout(t)
	want, err := os.ReadFile(final)
	require.NoError(t, err)
	require.NoError(t, os.Remove(final))
	f, release, err := CreateGrowing(filepath.Dir(final), d.Hex, int64(len(want)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(); release() })
	_, err = f.Write(want[:n])
	require.NoError(t, err)
	hs, _, _ := startServer(t, WithReaderCheckedStores(OpenLiveLayout(dir)))
	return &growing{want: want, f: f, release: release, grow: f.Name(), final: final,
		url: hs.URL + "/v2/ghcr.io/acme/tools/blobs/" + d.String()}
}

// getGrowing sends a GET of url and returns the response, its body unread.
func getGrowing(t *testing.T, url string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// TestGrowingBlobIsServedAsItGrows: a GET of a blob its writer is still
// writing is answered at once with the blob's size and what was written,
// and gets the rest as the writer writes it and renames it into place.
func TestGrowingBlobIsServedAsItGrows(t *testing.T) {
	g := growingServer(t, 1000)
	resp := getGrowing(t, g.url, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(len(g.want)), resp.ContentLength)
	head := make([]byte, 1000)
	_, err := io.ReadFull(resp.Body, head)
	require.NoError(t, err, "what was written is served before the rest is")
	assert.Equal(t, g.want[:1000], head)

	r := getGrowing(t, g.url, http.Header{"Range": {"bytes=10-19"}})
	require.Equal(t, http.StatusPartialContent, r.StatusCode)
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.Equal(t, g.want[10:20], b, "a range of what was written")

	wrote := make(chan error, 1)
	go func() {
		for off := 1000; off < len(g.want); off += 40000 {
			time.Sleep(20 * time.Millisecond)
			if _, err := g.f.Write(g.want[off:min(off+40000, len(g.want))]); err != nil {
				wrote <- err
				return
			}
		}
		err := os.Rename(g.grow, g.final)
		g.release()
		wrote <- err
	}()
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, <-wrote)
	assert.Equal(t, g.want, append(head, rest...))

	r = getGrowing(t, g.url, http.Header{"Range": {"bytes=10-19"}})
	require.Equal(t, http.StatusPartialContent, r.StatusCode)
	b, err = io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.Equal(t, g.want[10:20], b, "the blob, whole now")
}

// TestGrowingBlobWhoseWriterGivesUp: a reader gets an error, never a
// short blob that looks whole, whether its writer removed the blob or a
// power cut left it (no writer holds it): the latter at once, not after
// the stall time.
func TestGrowingBlobWhoseWriterGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove bool
	}{{"removed", true}, {"left by a power cut", false}} {
		t.Run(tc.name, func(t *testing.T) {
			g := growingServer(t, 1000)
			resp := getGrowing(t, g.url, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			head := make([]byte, 1000)
			_, err := io.ReadFull(resp.Body, head)
			require.NoError(t, err)
			if tc.remove {
				require.NoError(t, os.Remove(g.grow))
			}
			g.release()
			start := time.Now()
			rest, err := io.ReadAll(resp.Body)
			require.Error(t, err, "the response ends short of its length")
			assert.Empty(t, rest)
			assert.Less(t, time.Since(start), growStall/2, "a writer that let go is not waited for")
			assert.Equal(t, g.want[:1000], head)
		})
	}
}

// TestGrowingBodyStalls: a writer that holds the blob and writes nothing
// for the stall time fails the read; the read stops with its request.
func TestGrowingBodyStalls(t *testing.T) {
	dir := t.TempDir()
	w, release, err := CreateGrowing(dir, "ab", 10)
	require.NoError(t, err)
	defer release()
	defer w.Close()
	_, err = w.WriteString("12345")
	require.NoError(t, err)
	open := func(t *testing.T) *os.File {
		f, err := os.Open(w.Name())
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		return f
	}

	slept := time.Duration(0)
	g := &growingBody{f: open(t), name: w.Name(), size: 10, poll: time.Second, stall: 5 * time.Second,
		sleep: func(_ context.Context, d time.Duration) error { slept += d; return nil }, ctx: context.Background()}
	buf := make([]byte, 10)
	n, err := g.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "12345", string(buf[:n]))
	_, err = g.Read(buf)
	require.ErrorContains(t, err, "its writer wrote nothing for 5s, at byte 5 of 10")
	assert.Equal(t, 5*time.Second, slept)
	end, err := g.Seek(0, io.SeekEnd)
	require.NoError(t, err)
	assert.Equal(t, int64(10), end, "its whole size")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g = &growingBody{f: open(t), name: w.Name(), size: 10, poll: time.Second, stall: time.Hour, sleep: sleepCtx, ctx: ctx}
	_, err = g.Seek(5, io.SeekStart)
	require.NoError(t, err)
	_, err = g.Read(buf)
	require.ErrorIs(t, err, context.Canceled)
}

// TestCreateGrowingTakesAPowerCutsPlace: a growing blob a power cut left
// is replaced, named and locked as the writer's, and nothing else is
// left in the directory.
func TestCreateGrowingTakesAPowerCutsPlace(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, GrowingName("ab", 10))
	require.NoError(t, os.WriteFile(left, []byte("old"), 0o644))
	f, release, err := CreateGrowing(dir, "ab", 10)
	require.NoError(t, err)
	defer release()
	defer f.Close()
	assert.Equal(t, left, f.Name())
	_, err = f.WriteString("new")
	require.NoError(t, err)
	b, err := os.ReadFile(left)
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, names, 1)
	assert.Equal(t, filepath.Base(left), names[0].Name(), "no temporary file left")
	r, err := os.Open(left)
	require.NoError(t, err)
	defer r.Close()
	held, err := (&growingBody{f: r, name: left}).writing()
	require.NoError(t, err)
	assert.True(t, held, "its writer holds it")
	release()
	held, err = (&growingBody{f: r, name: left}).writing()
	require.NoError(t, err)
	assert.False(t, held, "let go")
}
