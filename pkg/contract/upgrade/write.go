package upgrade

import (
	"archive/tar"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
)

// Part is a part for Write: its name and role, and where its bytes come
// from.
type Part struct {
	// Name is the part's member name (rootfs.squashfs, vmlinuz,
	// initrd.img).
	Name string
	// Role says where the part goes on the node.
	Role Role
	// Open returns a new reader of the part's bytes from the start. Write
	// calls it twice, first to hash the part and then to copy it, and
	// closes what it returns; both reads must give the same bytes.
	Open func() (io.ReadCloser, error)
}

// FilePart returns a Part read from the file at path.
func FilePart(name string, role Role, path string) Part {
	return Part{Name: name, Role: role, Open: func() (io.ReadCloser, error) { return os.Open(path) }}
}

// Write writes an upgrade file to w: m with its parts filled in from
// parts, signed with key, then the parts. m must leave Parts empty (Write
// computes them) and FormatVersion zero or FormatVersion; everything else
// in it must be valid (see Manifest.Validate). The same inputs give the
// same bytes. Write returns the manifest it wrote.
//
// Each part is read twice, to hash it and to copy it; a part whose bytes
// differ the second time fails Write, leaving w with a partial file the
// caller discards.
func Write(ctx context.Context, w io.Writer, m Manifest, parts []Part, key ed25519.PrivateKey) (Manifest, error) {
	if len(m.Parts) > 0 {
		return Manifest{}, errors.New("write upgrade file: the manifest lists parts; leave them out: Write computes them from its parts")
	}
	if m.FormatVersion == 0 {
		m.FormatVersion = FormatVersion
	}
	if err := checkBeforeHashing(m, parts); err != nil {
		return Manifest{}, fmt.Errorf("write upgrade file: %w", err)
	}
	for _, p := range parts {
		info, err := hashPart(ctx, p)
		if err != nil {
			return Manifest{}, fmt.Errorf("write upgrade file: %w", err)
		}
		m.Parts = append(m.Parts, info)
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("write upgrade file: invalid manifest: %w", err)
	}
	manifest, err := m.Marshal()
	if err != nil {
		return Manifest{}, err
	}
	if len(manifest) > MaxManifestSize {
		return Manifest{}, fmt.Errorf("write upgrade file: the manifest has %d bytes, more than %d", len(manifest), MaxManifestSize)
	}
	sig, err := signManifest(key, manifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("write upgrade file: %w", err)
	}
	mtime, err := m.BuildTime()
	if err != nil {
		return Manifest{}, fmt.Errorf("write upgrade file: %w", err)
	}
	tw := tar.NewWriter(w)
	for _, b := range []struct {
		name string
		data []byte
	}{{ManifestName, manifest}, {SignatureName, sig}} {
		if err := tw.WriteHeader(memberHeader(b.name, int64(len(b.data)), mtime)); err != nil {
			return Manifest{}, fmt.Errorf("write upgrade file: %s: %w", b.name, err)
		}
		if _, err := tw.Write(b.data); err != nil {
			return Manifest{}, fmt.Errorf("write upgrade file: %s: %w", b.name, err)
		}
	}
	for i, p := range parts {
		if err := writePart(ctx, tw, p, m.Parts[i], mtime); err != nil {
			return Manifest{}, fmt.Errorf("write upgrade file: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return Manifest{}, fmt.Errorf("write upgrade file: %w", err)
	}
	return m, nil
}

// checkBeforeHashing validates m with parts of made-up sizes and hashes,
// so that a bad name or version fails before gigabytes are read.
func checkBeforeHashing(m Manifest, parts []Part) error {
	probe := m
	probe.Parts = nil
	for _, p := range parts {
		if p.Open == nil {
			return fmt.Errorf("part %q has no source", p.Name)
		}
		probe.Parts = append(probe.Parts, PartInfo{Name: p.Name, Role: p.Role, Size: 1, SHA256: hexSum(sha256.New())})
	}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("invalid manifest: %w", err)
	}
	return nil
}

// hashPart reads p once and returns its manifest entry.
func hashPart(ctx context.Context, p Part) (PartInfo, error) {
	h := sha256.New()
	n, err := copyFrom(ctx, h, p)
	if err != nil {
		return PartInfo{}, err
	}
	return PartInfo{Name: p.Name, Role: p.Role, Size: n, SHA256: hexSum(h)}, nil
}

// writePart copies p into tw as the member info describes, and checks
// that it read the bytes it hashed before.
func writePart(ctx context.Context, tw *tar.Writer, p Part, info PartInfo, mtime time.Time) error {
	if err := tw.WriteHeader(memberHeader(info.Name, info.Size, mtime)); err != nil {
		return fmt.Errorf("part %s: %w", info.Name, err)
	}
	h := sha256.New()
	n, err := copyFrom(ctx, io.MultiWriter(tw, h), p)
	switch {
	case errors.Is(err, tar.ErrWriteTooLong):
		return fmt.Errorf("part %s grew after it was hashed: its source must not change while Write runs", info.Name)
	case err != nil:
		return err
	case n != info.Size || hexSum(h) != info.SHA256:
		return fmt.Errorf("part %s changed after it was hashed (%d bytes, sha256 %s; first read %d bytes, sha256 %s): "+
			"its source must not change while Write runs", info.Name, n, hexSum(h), info.Size, info.SHA256)
	}
	return nil
}

// copyFrom opens p and copies it to dst, checking ctx between blocks.
func copyFrom(ctx context.Context, dst io.Writer, p Part) (int64, error) {
	rc, err := p.Open()
	if err != nil {
		return 0, fmt.Errorf("part %s: %w", p.Name, err)
	}
	defer rc.Close()
	n, err := copyContext(ctx, dst, rc, 0)
	if err != nil {
		return n, fmt.Errorf("part %s: %w", p.Name, err)
	}
	return n, nil
}

// copyBufferSize is the block copies read and write in.
const copyBufferSize = 1 << 20

// copyContext copies src to dst until EOF, and stops with ctx's error
// when ctx is done. size, when positive, is how much src holds: a smaller
// buffer does then.
func copyContext(ctx context.Context, dst io.Writer, src io.Reader, size int64) (int64, error) {
	n := int64(copyBufferSize)
	if size > 0 && size < n {
		n = size
	}
	buf := make([]byte, n)
	var copied int64
	for {
		if err := ctx.Err(); err != nil {
			return copied, err
		}
		k, rerr := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			copied += int64(w)
			if werr != nil {
				return copied, werr
			}
			if w != k {
				return copied, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return copied, nil
		}
		if rerr != nil {
			return copied, rerr
		}
	}
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
