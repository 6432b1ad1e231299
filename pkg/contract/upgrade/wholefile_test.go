package upgrade_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// TestWholeFile reads the file whole through WholeFile in reads of many
// sizes (each part ends within one read, on its edge, or across several):
// the bytes are the file's, and it passes iotest's checks of a reader.
func TestWholeFile(t *testing.T) {
	data := build(t, fixedKey(1))
	v, err := verify(data, fixedKey(1))
	require.NoError(t, err)
	for _, size := range []int{1, 7, 512, 513, 4096, len(data)} {
		var got bytes.Buffer
		_, err := io.CopyBuffer(&got, struct{ io.Reader }{v.WholeFile(t.Context())}, make([]byte, size))
		require.NoError(t, err, "reads of %d bytes", size)
		assert.True(t, bytes.Equal(data, got.Bytes()), "reads of %d bytes: the copy differs", size)
	}
	require.NoError(t, iotest.TestReader(v.WholeFile(t.Context()), data))
}

// TestWholeFileRefusesACorruptPart flips a byte in each part in turn of a
// file whose signature is good: the copy fails, naming that part, before
// its io.EOF, so that nothing keeps it.
func TestWholeFileRefusesACorruptPart(t *testing.T) {
	trusted := []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))}
	for _, p := range sampleParts() {
		t.Run(p.name, func(t *testing.T) {
			data := build(t, fixedKey(1))
			data[bytes.Index(data, p.data)+len(p.data)-1] ^= 1 // its last byte
			f, err := open(data)
			require.NoError(t, err)
			v, err := f.VerifySignature(trusted)
			require.NoError(t, err)
			n, err := io.Copy(io.Discard, v.WholeFile(t.Context()))
			require.ErrorIs(t, err, upgrade.ErrHashMismatch)
			assert.ErrorContains(t, err, "test.upgrade: member "+p.name+": sha256 ")
			assert.Less(t, n, int64(bytes.Index(data, p.data)+len(p.data)), "the part's last bytes are not handed out")
			_, again := v.WholeFile(t.Context()).Read(make([]byte, len(data)))
			require.ErrorIs(t, again, upgrade.ErrHashMismatch, "a single read of it all fails too")
		})
	}
}

// shortReaderAt is a file that may end early, as a stick pulled while
// it is read.
type shortReaderAt struct {
	r   io.ReaderAt
	end *int64
}

func (s shortReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= *s.end {
		return 0, io.EOF
	}
	if rest := *s.end - off; int64(len(p)) > rest {
		n, err := s.r.ReadAt(p[:rest], off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	return s.r.ReadAt(p, off)
}

// TestWholeFileTruncated opens a file whole, then cuts it short within
// its kernel's part: the copy fails with ErrTruncated naming that part.
func TestWholeFileTruncated(t *testing.T) {
	data := build(t, fixedKey(1))
	end := int64(len(data))
	f, err := upgrade.Open(shortReaderAt{bytes.NewReader(data), &end}, end, upgrade.WithName("test.upgrade"))
	require.NoError(t, err)
	v, err := f.VerifySignature([]signature.PublicKey{signature.PublicKeyOf(fixedKey(1))})
	require.NoError(t, err)
	kernel := sampleParts()[1]
	end = int64(bytes.Index(data, kernel.data) + 10)
	_, err = io.Copy(io.Discard, v.WholeFile(t.Context()))
	require.ErrorIs(t, err, upgrade.ErrTruncated)
	assert.ErrorContains(t, err, "member vmlinuz")
}

func TestWholeFileContext(t *testing.T) {
	data := build(t, fixedKey(1))
	v, err := verify(data, fixedKey(1))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = io.Copy(io.Discard, v.WholeFile(ctx))
	require.ErrorIs(t, err, context.Canceled)
}
