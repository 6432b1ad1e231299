package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	group = "root:x:0:\nnogroup:x:65534:\n"
)

// layerFile is one entry of a layer.
type layerFile struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// rootLayer makes the layer of a built image: /etc/passwd, /etc/group and
// the binary at /<name>, owned by root, with mtime epoch. The same inputs
// give the same bytes: entries are in a fixed order, headers carry nothing
// but name, mode, size, owner and mtime, and gzip runs with a fixed level
// and an empty header.
func rootLayer(binaryName string, binary []byte, epoch time.Time) (v1.Layer, error) {
	files := []layerFile{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: binaryName, mode: 0o755, data: binary},
	}
	return filesLayer(files, epoch)
}

// filesLayer makes a reproducible layer of files, in the order given.
func filesLayer(files []layerFile, epoch time.Time) (v1.Layer, error) {
	compressed, err := gzipTar(files, epoch)
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	return layer, nil
}

func gzipTar(files []layerFile, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{
			Name:     f.name,
			Mode:     f.mode,
			Size:     int64(len(f.data)),
			ModTime:  epoch,
			Typeflag: tar.TypeReg,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
