package bundle

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tarballSource reads an image from a `docker save` archive (manifest.json)
// or an OCI archive (a tar of an OCI image layout), either possibly
// gzip-compressed.
type tarballSource struct {
	written   string // the path as the bundle has it, for messages
	path      string
	ref       string
	platforms []v1.Platform
}

func (s *tarballSource) String() string { return "tarball " + s.written }

func (s *tarballSource) key(context.Context) (string, error) { return "", nil }

func (s *tarballSource) fetch(ctx context.Context) (artifact, func(), error) {
	fi, err := os.Stat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return artifact{}, nil, fmt.Errorf("not found: %s does not exist", s.path)
	}
	if err != nil {
		return artifact{}, nil, err
	}
	if !fi.Mode().IsRegular() {
		return artifact{}, nil, fmt.Errorf("%s is not a file", s.path)
	}
	open := tarOpener(s.path)
	kind, err := archiveKind(open)
	if err != nil {
		return artifact{}, nil, err
	}
	if kind == "oci" {
		return s.fetchOCI(ctx, open)
	}
	var tag *name.Tag
	if s.ref != "" {
		t, err := name.NewTag(s.ref)
		if err != nil {
			return artifact{}, nil, fmt.Errorf("ref %q: %w", s.ref, err)
		}
		tag = &t
	}
	img, err := tarball.Image(open, tag)
	if err != nil {
		return artifact{}, nil, fmt.Errorf("read docker archive: %w", err)
	}
	a, err := selectPlatforms(artifact{image: img}, s.platforms)
	return a, func() {}, err
}

// fetchOCI unpacks an OCI archive into a temporary directory, removed by
// the returned func once the image has been copied.
func (s *tarballSource) fetchOCI(ctx context.Context, open tarball.Opener) (artifact, func(), error) {
	tmp, err := os.MkdirTemp("", "terrarium-oci-archive-")
	if err != nil {
		return artifact{}, nil, err
	}
	done := func() { _ = os.RemoveAll(tmp) } // scratch space: a leftover wastes disk, nothing more
	if err := unpackLayout(ctx, open, tmp); err != nil {
		done()
		return artifact{}, nil, fmt.Errorf("unpack OCI archive: %w", err)
	}
	a, err := readLayout(tmp, s.ref, s.platforms)
	if err != nil {
		done()
		return artifact{}, nil, err
	}
	return a, done, nil
}

// tarOpener opens the archive at p, decompressing it when it is gzipped.
func tarOpener(p string) tarball.Opener {
	return func() (io.ReadCloser, error) {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		br := bufio.NewReader(f)
		magic, _ := br.Peek(2)
		if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
			return readCloser{Reader: br, close: f.Close}, nil
		}
		zr, err := gzip.NewReader(br)
		if err != nil {
			_ = f.Close() // read only
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return readCloser{Reader: zr, close: func() error { return errors.Join(zr.Close(), f.Close()) }}, nil
	}
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// archiveKind tells a docker archive ("docker", with manifest.json) from an
// OCI archive ("oci", with index.json only).
func archiveKind(open tarball.Opener) (string, error) {
	rc, err := open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	oci := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("not a tar archive: %w", err)
		}
		switch path.Clean(h.Name) {
		case "manifest.json":
			return "docker", nil
		case "index.json":
			oci = true
		}
	}
	if oci {
		return "oci", nil
	}
	return "", errors.New("neither a docker archive (no manifest.json) nor an OCI archive (no index.json)")
}

// unpackLayout extracts the OCI layout files (oci-layout, index.json and
// blobs/...) of an archive into dir, ignoring anything else.
func unpackLayout(ctx context.Context, open tarball.Opener, dir string) error {
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if h.Typeflag != tar.TypeReg || !isLayoutFile(name) {
			continue
		}
		if err := extractFile(ctx, tr, filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

func isLayoutFile(name string) bool {
	if name == "oci-layout" || name == "index.json" {
		return true
	}
	return strings.HasPrefix(name, "blobs/") && !strings.Contains(name, "..")
}

func extractFile(ctx context.Context, r io.Reader, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := copyCtx(ctx, f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
