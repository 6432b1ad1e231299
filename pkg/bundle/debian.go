package bundle

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarium-os/terrarium/pkg/cache"
)

const (
	debianKeyVersion = "bundle-debian-layer/v1"
	debianCacheKind  = "debian-layers"
	debianLayerFile  = "layer.tar.gz"
	defaultMirror    = "http://deb.debian.org/debian"
)

// debianDropped are the unpacked paths that an image does not need.
var debianDropped = []string{
	"usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/",
	"usr/share/lintian/", "usr/share/bug/", "var/cache/", "var/log/", "var/lib/apt/",
	"var/lib/dpkg/", "etc/apt/", "etc/dpkg/", "tmp/", "dev/", "proc/", "sys/", "run/",
}

// mergedUsr are the links of a merged-/usr system, which package
// maintainer scripts (not run by --variant=extract) would otherwise own.
var mergedUsr = map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}

// debianLayerKey identifies a Debian layer.
func debianLayerKey(d DebianLayer, epoch time.Time) (string, error) {
	links := make([]string, 0, len(d.Links))
	for l, t := range d.Links {
		links = append(links, l+"->"+t)
	}
	sort.Strings(links)
	return cache.NewKey(debianKeyVersion).
		String("suite", d.Suite).String("mirror", mirrorOf(d)).
		Strings("packages", d.Packages).Strings("links", links).
		String("epoch", epoch.UTC().Format(time.RFC3339)).Sum()
}

func mirrorOf(d DebianLayer) string {
	if d.Mirror == "" {
		return defaultMirror
	}
	return d.Mirror
}

// debianLayerFromCache returns the Debian layer d, unpacking it with
// mmdebstrap the first time.
func debianLayerFromCache(ctx context.Context, c *cache.Cache, d DebianLayer, epoch time.Time, log *slog.Logger) (v1.Layer, error) {
	key, err := debianLayerKey(d, epoch)
	if err != nil {
		return nil, err
	}
	dir, _, err := c.Fill(ctx, debianCacheKind, key, func(ctx context.Context, dir string) error {
		return makeDebianLayer(ctx, d, epoch, filepath.Join(dir, debianLayerFile), log)
	})
	if err != nil {
		return nil, fmt.Errorf("debian layer %s: %w", strings.Join(d.Packages, ","), err)
	}
	return tarball.LayerFromFile(filepath.Join(dir, debianLayerFile), tarball.WithMediaType(types.OCILayer))
}

// makeDebianLayer unpacks the packages with mmdebstrap into a tar and
// rewrites it as a reproducible layer: entries sorted by name, owned by
// root, with mtime epoch, documentation and package-manager state dropped,
// and the merged-/usr and configured links added.
func makeDebianLayer(ctx context.Context, d DebianLayer, epoch time.Time, out string, log *slog.Logger) error {
	tmp, err := os.MkdirTemp("", "terrarium-debian-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	raw := filepath.Join(tmp, "extract.tar")
	log.Info("mmdebstrap (image layer)", "suite", d.Suite, "packages", strings.Join(d.Packages, ","))
	cmd := exec.CommandContext(ctx, "mmdebstrap", "--variant=extract", "--include="+strings.Join(d.Packages, ","),
		"--format=tar", "--quiet", d.Suite, raw, mirrorOf(d))
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", epoch.Unix()))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mmdebstrap --variant=extract %s: %w\n%s", d.Suite, err, strings.TrimSpace(string(b)))
	}
	entries, err := readTarEntries(raw)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[strings.TrimSuffix(e.hdr.Name, "/")] = true
	}
	add := func(name, target string) {
		if !have[name] {
			entries = append(entries, tarEntry{hdr: &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}})
			have[name] = true
		}
	}
	for l, t := range mergedUsr {
		add(l, t)
	}
	for l, t := range d.Links {
		add(path.Clean(l), t)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].hdr.Name < entries[j].hdr.Name })
	return writeLayerFile(out, entries, epoch)
}

// tarEntry is a header and, for a regular file, its content.
type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// readTarEntries reads a tar whole, normalizing names to be relative
// ("./usr/x" → "usr/x") and dropping debianDropped paths.
func readTarEntries(p string) ([]tarEntry, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tarEntry
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" || name == "." || dropped(name) {
			continue
		}
		if h.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
			name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			h.Linkname = strings.TrimPrefix(strings.TrimPrefix(h.Linkname, "./"), "/")
		}
		h.Name = name
		e := tarEntry{hdr: h}
		if h.Typeflag == tar.TypeReg {
			if e.data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("read %s from %s: %w", name, p, err)
			}
		}
		out = append(out, e)
	}
}

func dropped(name string) bool {
	for _, d := range debianDropped {
		if strings.HasPrefix(name, d) || name+"/" == d {
			return true
		}
	}
	return false
}

// writeLayerFile writes entries as a gzip'd tar with normalized headers.
func writeLayerFile(out string, entries []tarEntry, epoch time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.hdr.Name, Typeflag: e.hdr.Typeflag, Linkname: e.hdr.Linkname,
			Mode: e.hdr.Mode & 0o7777, Size: int64(len(e.data)), ModTime: epoch, Format: tar.FormatPAX,
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write layer entry %s: %w", h.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}
