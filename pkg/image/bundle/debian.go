package bundle

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

const (
	debianKeyVersion = "bundle-debian-layer/v2"
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

// debianLayerKey identifies a Debian layer: a locked layer by the
// content of its .deb files, an unlocked one by what it asks the archive.
func debianLayerKey(d DebianLayer, epoch time.Time) (string, error) {
	links := make([]string, 0, len(d.Links))
	for l, t := range d.Links {
		links = append(links, l+"->"+t)
	}
	sort.Strings(links)
	k := cache.NewKey(debianKeyVersion)
	if len(d.Lock) > 0 {
		sums := make([]string, len(d.Lock))
		for i, p := range d.Lock {
			sums[i] = p.SHA256
		}
		k.Strings("debs", sums)
	} else {
		k.String("suite", d.Suite).String("mirror", mirrorOf(d)).Strings("packages", d.Packages)
	}
	return k.Strings("links", links).String("epoch", epoch.UTC().Format(time.RFC3339)).Sum()
}

func mirrorOf(d DebianLayer) string {
	if d.Mirror == "" {
		return defaultMirror
	}
	return d.Mirror
}

// debianLayerFromCache returns the Debian layer d, making it the first
// time: from its locked .deb files, or (unlocked) from what the archive
// resolves the packages to now.
func debianLayerFromCache(ctx context.Context, c *cache.Cache, d DebianLayer, epoch time.Time, log *slog.Logger) (v1.Layer, error) {
	key, err := debianLayerKey(d, epoch)
	if err != nil {
		return nil, err
	}
	dir, _, err := c.Fill(ctx, debianCacheKind, key, func(ctx context.Context, dir string) error {
		if len(d.Lock) == 0 {
			log.Warn("Debian layer without a lock: its content depends on the archive on the day of the build", "packages", strings.Join(d.Packages, ","))
			lock, err := LockDebian(ctx, d, log)
			if err != nil {
				return err
			}
			d.Lock = lock
		}
		return makeDebianLayer(ctx, c, d, epoch, filepath.Join(dir, debianLayerFile), log)
	})
	if err != nil {
		return nil, fmt.Errorf("debian layer %s: %w", strings.Join(d.Packages, ","), err)
	}
	return tarball.LayerFromFile(filepath.Join(dir, debianLayerFile), tarball.WithMediaType(types.OCILayer))
}

// makeDebianLayer unpacks the locked .deb files (fetched and verified
// through the cache) without maintainer scripts, as mmdebstrap's extract
// variant does, and writes a reproducible layer: entries sorted by name,
// owned by root, with mtime epoch, documentation and package-manager state
// dropped, merged-/usr paths, and the merged-/usr and configured links.
func makeDebianLayer(ctx context.Context, c *cache.Cache, d DebianLayer, epoch time.Time, out string, log *slog.Logger) error {
	client := &http.Client{Timeout: 10 * time.Minute}
	// Each path with the package that ships it (for conflicts).
	type owned struct {
		tarEntry
		pkg string
	}
	byName := map[string]owned{}
	for i, p := range d.Lock {
		deb, err := fetchDeb(ctx, c, client, mirrorOf(d), p)
		if errors.Is(err, ErrDebGone) {
			return fmt.Errorf("debian.lock[%d]: %w; %s", i, err, debGoneHint(d))
		}
		if err != nil {
			return fmt.Errorf("debian.lock[%d] %s: %w", i, p.Package, err)
		}
		entries, err := debEntries(ctx, deb)
		if err != nil {
			return fmt.Errorf("debian.lock[%d] %s: %w", i, p.Package, err)
		}
		for _, e := range entries {
			if prev, ok := byName[e.hdr.Name]; ok {
				if e.hdr.Typeflag == tar.TypeDir {
					continue
				}
				return fmt.Errorf("debian.lock[%d]: %s and %s both ship %s", i, prev.pkg, p.Package, e.hdr.Name)
			}
			byName[e.hdr.Name] = owned{e, p.Package}
		}
	}
	log.Info("unpacked Debian packages (image layer)", "debs", len(d.Lock), "entries", len(byName))
	add := func(name, target string) {
		if _, ok := byName[name]; !ok {
			byName[name] = owned{tarEntry: tarEntry{hdr: &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}}
		}
	}
	for l, t := range mergedUsr {
		add(l, t)
	}
	for l, t := range d.Links {
		add(path.Clean(l), t)
	}
	entries := make([]tarEntry, 0, len(byName))
	for _, e := range byName {
		entries = append(entries, e.tarEntry)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].hdr.Name < entries[j].hdr.Name })
	return writeLayerFile(out, entries, epoch)
}

// debEntries reads the file-system tree of a .deb (dpkg-deb
// --fsys-tarfile), normalized by readTar, with paths of a
// merged-/usr system (bin/x → usr/bin/x).
func debEntries(ctx context.Context, deb string) ([]tarEntry, error) {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	entries, rerr := readTar(stdout, deb)
	// Drain what readTar left so dpkg-deb never blocks on a full pipe;
	// an error here surfaces as dpkg-deb's own through Wait.
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, strings.TrimSpace(stderr.String()))
	}
	if rerr != nil {
		return nil, rerr
	}
	out := entries[:0]
	for _, e := range entries {
		e.hdr.Name = usrMerged(e.hdr.Name)
		if e.hdr.Typeflag == tar.TypeLink {
			e.hdr.Linkname = usrMerged(e.hdr.Linkname)
		}
		if _, link := mergedUsr[strings.TrimSuffix(e.hdr.Name, "/")]; link {
			continue // bin/ itself: a link to usr/bin in the image
		}
		out = append(out, e)
	}
	return out, nil
}

// usrMerged maps a path under /bin, /sbin, /lib or /lib64 to /usr.
func usrMerged(name string) string {
	for l, t := range mergedUsr {
		if rest, ok := strings.CutPrefix(name, l+"/"); ok && rest != "" {
			return t + "/" + rest
		}
	}
	return name
}

// tarEntry is a header and, for a regular file, its content.
type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// readTar reads a tar stream whole, normalizing names to be relative
// ("./usr/x" → "usr/x") and dropping debianDropped paths; label names the
// stream in errors.
func readTar(r io.Reader, label string) ([]tarEntry, error) {
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", label, err)
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
				return nil, fmt.Errorf("read %s from %s: %w", name, label, err)
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
