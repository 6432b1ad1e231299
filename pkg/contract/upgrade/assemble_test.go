package upgrade_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// partsOf returns the sample parts by name, for Assemble.
func partsOf(parts []testPart) func(upgrade.PartInfo) (io.ReaderAt, error) {
	return func(p upgrade.PartInfo) (io.ReaderAt, error) {
		for _, tp := range parts {
			if tp.name == p.Name {
				return bytes.NewReader(tp.data), nil
			}
		}
		return nil, errors.New("no such part")
	}
}

// TestAssembleIsTheFile makes the sample file again of its signed
// manifest and its parts: the same size and bytes, whatever the reads
// (each across a member's edge, within one, or past the end), and a file
// Open and Verify accept.
func TestAssembleIsTheFile(t *testing.T) {
	data := build(t, fixedKey(1))
	v, err := verify(data, fixedKey(1))
	require.NoError(t, err)
	manifest, sig := v.SignedManifest()

	r, size, err := upgrade.Assemble(manifest, sig, partsOf(sampleParts()))
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), size)
	require.NoError(t, iotest.TestReader(io.NewSectionReader(r, 0, size), data))
	for _, tc := range []struct {
		name    string
		off, n  int
		wantN   int
		wantEOF bool
	}{
		{name: "the first header", off: 0, n: 512, wantN: 512},
		{name: "across a header's end", off: 500, n: 30, wantN: 30},
		{name: "all of it", off: 0, n: len(data), wantN: len(data)},
		{name: "its last byte", off: len(data) - 1, n: 1, wantN: 1},
		{name: "past its end", off: len(data) - 10, n: 20, wantN: 10, wantEOF: true},
		{name: "at its end", off: len(data), n: 1, wantN: 0, wantEOF: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, tc.n)
			n, err := r.ReadAt(buf, int64(tc.off))
			if tc.wantEOF {
				assert.ErrorIs(t, err, io.EOF)
			} else {
				assert.NoError(t, err)
			}
			require.Equal(t, tc.wantN, n)
			assert.Equal(t, data[tc.off:tc.off+n], buf[:n])
		})
	}
	f, err := upgrade.Open(r, size, upgrade.WithName("test.upgrade"))
	require.NoError(t, err)
	_, err = f.Verify(t.Context(), []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))})
	require.NoError(t, err)
	assert.Equal(t, v.Manifest(), f.Manifest())
}

// A part shorter than its manifest says makes a read of it fail, and the
// file it assembles fails Verify; a part that cannot be opened, or a
// manifest that does not parse, fails Assemble.
func TestAssembleRefusesWhatIsNotAFile(t *testing.T) {
	data := build(t, fixedKey(1))
	v, err := verify(data, fixedKey(1))
	require.NoError(t, err)
	manifest, sig := v.SignedManifest()

	short := sampleParts()
	short[0].data = short[0].data[:100]
	r, size, err := upgrade.Assemble(manifest, sig, partsOf(short))
	require.NoError(t, err, "the parts are not read before the file is")
	_, err = io.ReadAll(io.NewSectionReader(r, 0, size))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	f, err := upgrade.Open(r, size, upgrade.WithName("test.upgrade"))
	require.NoError(t, err, "Open reads the headers alone")
	_, err = f.Verify(t.Context(), []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))})
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)

	failing := func(upgrade.PartInfo) (io.ReaderAt, error) { return failingReader{}, nil }
	r, size, err = upgrade.Assemble(manifest, sig, failing)
	require.NoError(t, err)
	_, err = io.ReadAll(io.NewSectionReader(r, 0, size))
	require.ErrorContains(t, err, "the part does not match", "a part reader's error, with all it was asked for read")

	_, _, err = upgrade.Assemble(manifest, sig, func(upgrade.PartInfo) (io.ReaderAt, error) { return nil, errors.New("gone") })
	require.ErrorContains(t, err, "part rootfs.squashfs: gone")

	_, _, err = upgrade.Assemble([]byte("{"), sig, partsOf(sampleParts()))
	require.ErrorContains(t, err, "assemble upgrade file")
}

// failingReader reads zeros, all it is asked for, and fails every read.
type failingReader struct{}

func (failingReader) ReadAt(p []byte, _ int64) (int, error) {
	clear(p)
	return len(p), errors.New("the part does not match")
}

// Checked parts, read in order, make the file whole when every part
// matches; the read that ends a part that differs fails, naming it; a
// read out of order fails.
func TestCheckedPart(t *testing.T) {
	trustedKeys := []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))}
	data := build(t, fixedKey(1))
	assemble := func(data []byte) ([]byte, error) {
		f, err := open(data)
		require.NoError(t, err)
		v, err := f.VerifySignature(trustedKeys)
		require.NoError(t, err)
		manifest, sig := v.SignedManifest()
		r, size, err := upgrade.Assemble(manifest, sig, func(p upgrade.PartInfo) (io.ReaderAt, error) { return v.CheckedPart(p.Name) })
		require.NoError(t, err)
		return io.ReadAll(io.NewSectionReader(r, 0, size))
	}
	got, err := assemble(data)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	bad := bytes.Clone(data)
	bad[bytes.Index(bad, sampleParts()[1].data)+3] ^= 1
	_, err = assemble(bad)
	require.ErrorIs(t, err, upgrade.ErrHashMismatch)
	assert.ErrorContains(t, err, "part vmlinuz differs from its signed manifest")

	v, err := verify(data, fixedKey(1))
	require.NoError(t, err)
	r, err := v.CheckedPart("vmlinuz")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 10), 5)
	assert.ErrorContains(t, err, "not where its last read ended")
}
