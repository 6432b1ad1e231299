package readahead

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCopy(t *testing.T) {
	for _, size := range []int{0, 1, BufferSize - 1, BufferSize, BufferSize + 1, Depth*BufferSize + BufferSize/2} {
		data := make([]byte, size)
		_, err := rand.Read(data)
		require.NoError(t, err)
		var dst bytes.Buffer
		n, err := Copy(t.Context(), &dst, bytes.NewReader(data))
		require.NoError(t, err, "size %d", size)
		assert.Equal(t, int64(size), n)
		assert.True(t, bytes.Equal(data, dst.Bytes()), "size %d: the copy differs", size)
	}
}

// failingReader gives good bytes, then fails.
type failingReader struct {
	left int
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.left == 0 {
		return 0, f.err
	}
	n := min(len(p), f.left)
	f.left -= n
	return n, nil
}

func TestCopySourceError(t *testing.T) {
	boom := errors.New("the stick went away")
	var dst bytes.Buffer
	n, err := Copy(t.Context(), &dst, &failingReader{left: 2*BufferSize + 7, err: boom})
	require.ErrorIs(t, err, boom)
	// What was read before the error is written, as io.Copy does.
	assert.Equal(t, int64(2*BufferSize+7), n)
}

// countingReader counts its reads of an endless stream, and fails the
// test if it is read once returned is set.
type countingReader struct {
	t        *testing.T
	reads    atomic.Int64
	returned atomic.Bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.returned.Load() {
		c.t.Error("read after Copy returned")
	}
	c.reads.Add(1)
	return len(p), nil
}

// failingWriter fails its first write.
type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestCopyDestinationErrorStopsTheReader(t *testing.T) {
	full := errors.New("no space left on device")
	src := &countingReader{t: t}
	_, err := Copy(t.Context(), failingWriter{full}, src)
	src.returned.Store(true)
	require.ErrorIs(t, err, full)
	// None went beyond the buffers in flight, and (countingReader) none
	// after Copy returned.
	assert.LessOrEqual(t, src.reads.Load(), int64(Depth+1))
	time.Sleep(10 * time.Millisecond) // a reader left running would read now
}

// A panic in the source is raised in Copy's caller, after the writer
// stopped; one in the destination stops the reader before it goes on.
func TestCopyPanics(t *testing.T) {
	assert.PanicsWithValue(t, "bad stick", func() {
		_, _ = Copy(t.Context(), io.Discard, readerFunc(func([]byte) (int, error) { panic("bad stick") }))
	})
	src := &countingReader{t: t}
	assert.PanicsWithValue(t, "bad disk", func() {
		_, _ = Copy(t.Context(), writerFunc(func([]byte) (int, error) { panic("bad disk") }), src)
	})
	src.returned.Store(true)
	time.Sleep(10 * time.Millisecond)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestCopyContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	src := &countingReader{t: t}
	_, err := Copy(ctx, io.Discard, src)
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, src.reads.Load(), "nothing read once cancelled")

	// Cancelled mid-way, by the writer.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	w := writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
	_, err = Copy(ctx, w, &countingReader{t: t})
	require.ErrorIs(t, err, context.Canceled)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestCopyShortWrite(t *testing.T) {
	w := writerFunc(func(p []byte) (int, error) { return len(p) / 2, nil })
	_, err := Copy(t.Context(), w, bytes.NewReader(make([]byte, 10)))
	require.ErrorIs(t, err, io.ErrShortWrite)
}

// hashingReader hashes what it reads, as a part checked on its way in.
type hashingReader struct {
	r io.Reader
	h hash.Hash
}

func (h hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

// BenchmarkCopyHashingBothSides copies 64 MiB hashed on the way in and on
// the way out (an upgrade file's parts and its digest) with io.Copy, the
// baseline, and with Copy.
func BenchmarkCopyHashingBothSides(b *testing.B) {
	data := make([]byte, 64<<20)
	for _, c := range []struct {
		name string
		copy func(context.Context, io.Writer, io.Reader) (int64, error)
	}{
		{"io.Copy", func(_ context.Context, w io.Writer, r io.Reader) (int64, error) {
			return io.CopyBuffer(w, r, make([]byte, BufferSize))
		}},
		{"readahead.Copy", Copy},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				src := hashingReader{bytes.NewReader(data), sha256.New()}
				if _, err := c.copy(b.Context(), sha256.New(), src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCopyKeepsTheSourcesError: a source's own io.ErrUnexpectedEOF (a
// file shorter than it said) is not taken for the end.
func TestCopyKeepsTheSourcesError(t *testing.T) {
	_, err := Copy(t.Context(), io.Discard, &failingReader{left: 10, err: io.ErrUnexpectedEOF})
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
