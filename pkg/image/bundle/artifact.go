package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
)

// artifact is an image or an index (exactly one of the two is set), with
// the artifacts whose subject is one of its manifests.
type artifact struct {
	image     v1.Image
	index     v1.ImageIndex
	referrers []artifact
}

// manifest is what images and indexes have in common.
type manifest interface {
	MediaType() (types.MediaType, error)
	Digest() (v1.Hash, error)
	Size() (int64, error)
	RawManifest() ([]byte, error)
}

func (a artifact) manifest() manifest {
	if a.index != nil {
		return a.index
	}
	return a.image
}

// descriptor describes the artifact's manifest.
func (a artifact) descriptor() (v1.Descriptor, error) {
	m := a.manifest()
	if m == nil {
		return v1.Descriptor{}, errors.New("neither an image nor an index")
	}
	mt, err := m.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("media type: %w", err)
	}
	d, err := m.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("digest: %w", err)
	}
	size, err := m.Size()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest size: %w", err)
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

// blob is one blob of an artifact.
type blob struct {
	digest v1.Hash
	size   int64
	open   func() (io.ReadCloser, error)
}

// blobs lists the artifact's distinct blobs, every manifest after the
// blobs it refers to, so a manifest in a store implies its content is too.
func (a artifact) blobs() ([]blob, error) {
	var out []blob
	seen := map[v1.Hash]bool{}
	add := func(b blob) {
		if !seen[b.digest] {
			seen[b.digest] = true
			out = append(out, b)
		}
	}
	if err := a.walk(add); err != nil {
		return nil, err
	}
	return out, nil
}

func (a artifact) walk(add func(blob)) error {
	if a.index != nil {
		if err := walkIndex(a.index, add); err != nil {
			return err
		}
	} else if err := walkImage(a.image, add); err != nil {
		return err
	}
	desc, err := a.descriptor()
	if err != nil {
		return err
	}
	raw, err := a.manifest().RawManifest()
	if err != nil {
		return fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	add(blob{digest: desc.Digest, size: desc.Size, open: bytesOpener(raw)})
	return nil
}

func walkIndex(idx v1.ImageIndex, add func(blob)) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("index manifest: %w", err)
	}
	for _, d := range im.Manifests {
		var child artifact
		switch {
		case d.MediaType.IsIndex():
			child.index, err = idx.ImageIndex(d.Digest)
		case d.MediaType.IsImage():
			child.image, err = idx.Image(d.Digest)
		default:
			return fmt.Errorf("index entry %s: unsupported media type %q", d.Digest, d.MediaType)
		}
		if err != nil {
			return fmt.Errorf("index entry %s: %w", d.Digest, err)
		}
		if err := child.walk(add); err != nil {
			return err
		}
	}
	return nil
}

func walkImage(img v1.Image, add func(blob)) error {
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("image manifest: %w", err)
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	add(blob{digest: m.Config.Digest, size: m.Config.Size, open: bytesOpener(cfg)})
	for _, l := range m.Layers {
		if !l.MediaType.IsDistributable() {
			continue // foreign layers are fetched from their URLs
		}
		add(blob{digest: l.Digest, size: l.Size, open: layerOpener(img, l.Digest)})
	}
	return nil
}

func bytesOpener(b []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

func layerOpener(img v1.Image, h v1.Hash) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		l, err := img.LayerByDigest(h)
		if err != nil {
			return nil, err
		}
		return l.Compressed()
	}
}

// totalSize is the sum of the blobs' sizes.
func totalSize(bs []blob) int64 {
	var n int64
	for _, b := range bs {
		n += b.size
	}
	return n
}

// copyBlobs writes the blobs into the OCI layout at dir, skipping those it
// already holds, and reports the bytes done out of the total to progress.
func copyBlobs(ctx context.Context, dir string, bs []blob, progress func(done, total int64)) error {
	total := totalSize(bs)
	var done int64
	progress(0, total)
	for _, b := range bs {
		err := writeBlob(ctx, dir, b, func(n int64) { progress(done+n, total) })
		if err != nil {
			return err
		}
		done += b.size
		progress(done, total)
	}
	return nil
}

// writeBlob copies b into dir/blobs/<alg>/<hex> unless a file of its size is
// there. The content is verified against the digest and size before it is
// renamed into place, so a blob file is always complete and correct.
func writeBlob(ctx context.Context, dir string, b blob, progress func(n int64)) error {
	if b.digest.Algorithm != "sha256" {
		return fmt.Errorf("blob %s: unsupported digest algorithm", b.digest)
	}
	blobDir := filepath.Join(dir, "blobs", b.digest.Algorithm)
	final := filepath.Join(blobDir, b.digest.Hex)
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() && fi.Size() == b.size {
		return nil
	}
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	rc, err := b.open()
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob %s is missing: %w", b.digest, err)
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	defer rc.Close()
	err = atomicfile.Write(final, 0o644, func(w io.Writer) error {
		return fillBlob(ctx, w, rc, b, progress)
	})
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	return nil
}

// fillBlob copies r into w, checking its digest and size.
func fillBlob(ctx context.Context, w io.Writer, r io.Reader, b blob, progress func(n int64)) error {
	h := sha256.New()
	cw := &countingWriter{progress: progress}
	n, err := copyCtx(ctx, io.MultiWriter(w, h, cw), r)
	if err != nil {
		return err
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != b.digest.String() || n != b.size {
		return fmt.Errorf("content does not match its descriptor: read %d bytes with digest %s, want %d bytes", n, got, b.size)
	}
	return nil
}

type countingWriter struct {
	n        int64
	progress func(n int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.progress(c.n)
	return len(p), nil
}

// copyCtx is io.Copy that stops between reads once ctx is done.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			if _, err := w.Write(buf[:k]); err != nil {
				return n, err
			}
			n += int64(k)
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}
