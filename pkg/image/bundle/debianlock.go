package bundle

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// debCacheKind holds .deb files by their sha256: once fetched, a locked
// file is never fetched again, even after the archive dropped it.
const debCacheKind = "debs"

// CacheSources are the cache kinds of this package's that hold inputs,
// not artifacts: the archive may have dropped them since, so the cache's
// bound never removes them (cache.Cache.Prune).
func CacheSources() []string { return []string{debCacheKind} }

// ErrDebGone is returned when the archive no longer has a locked .deb.
var ErrDebGone = errors.New("no longer in the archive")

// LockDebian resolves d's packages and their dependencies in the archive
// as it is now (with mmdebstrap, without installing anything) and returns
// the exact .deb files, sorted by package name: the lock that makes the
// layer reproducible whatever the archive holds later.
func LockDebian(ctx context.Context, d DebianLayer, log *slog.Logger) ([]DebianPackage, error) {
	return LockPackages(ctx, d.Suite, mirrorOf(d), d.Packages, "extract", log)
}

// LockPackages resolves packages, with their dependencies and what
// mmdebstrap's variant adds (minbase: the essential and required
// packages), in the archive at mirror as it is now, and returns the exact
// .deb files, sorted by package name.
func LockPackages(ctx context.Context, suite, mirror string, packages []string, variant string, log *slog.Logger) ([]DebianPackage, error) {
	tmp, err := os.MkdirTemp("", "terrarium-debian-lock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	log.Info("resolving Debian packages", "suite", suite, "variant", variant, "packages", strings.Join(packages, ","), "mirror", mirror)
	cmd := exec.CommandContext(ctx, "mmdebstrap", "--variant="+variant, "--include="+strings.Join(packages, ","),
		// essential/unlink: keep the essential packages' files too, which
		// mmdebstrap otherwise deletes once installed (extract mode installs
		// nothing, so it keeps every file anyway).
		"--skip=cleanup/apt", "--skip=essential/unlink", "--format=directory", "--quiet", suite, root, mirror)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("resolve %s in %s %s: mmdebstrap: %w\n%s", strings.Join(packages, ","), mirror, suite, err, strings.TrimSpace(string(b)))
	}
	index, err := readPackagesIndexes(filepath.Join(root, "var/lib/apt/lists"))
	if err != nil {
		return nil, err
	}
	debs, err := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	if err != nil {
		return nil, err
	}
	if len(debs) == 0 {
		return nil, fmt.Errorf("resolve %s: mmdebstrap downloaded no .deb files", strings.Join(packages, ","))
	}
	d := DebianLayer{Suite: suite, Mirror: mirror}
	var lock []DebianPackage
	for _, deb := range debs {
		sum, err := fileSHA256(deb)
		if err != nil {
			return nil, err
		}
		p, ok := index[sum]
		if !ok {
			return nil, fmt.Errorf("resolve %s: %s (sha256 %s) is in no Packages index of %s", d.Suite, filepath.Base(deb), sum, mirrorOf(d))
		}
		lock = append(lock, p)
	}
	sort.Slice(lock, func(i, j int) bool { return lock[i].Package < lock[j].Package })
	// A lock must name every package the resolution installed (extract
	// mode installs none): one it misses cannot be installed from the lock.
	if missing, err := missingFromLock(filepath.Join(root, "var/lib/dpkg/status"), lock); err != nil {
		return nil, err
	} else if len(missing) > 0 {
		return nil, fmt.Errorf("resolve %s: installed but without a .deb file to lock: %s", strings.Join(packages, ","), strings.Join(missing, ", "))
	}
	return lock, nil
}

// readPackagesIndexes reads the archive's Packages indexes that apt
// downloaded into dir, by the sha256 of each .deb.
func readPackagesIndexes(dir string) (map[string]DebianPackage, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_Packages"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Packages index in %s", dir)
	}
	out := map[string]DebianPackage{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		err = parsePackagesIndex(fh, out)
		_ = fh.Close() // read only, to its end
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
	}
	return out, nil
}

// parsePackagesIndex adds the stanzas of a Debian Packages index (deb822:
// "Field: value" lines, blank lines between stanzas) to out, by SHA256.
func parsePackagesIndex(r io.Reader, out map[string]DebianPackage) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	var cur DebianPackage
	flush := func() {
		if cur.Package != "" && cur.SHA256 != "" && cur.File != "" {
			out[cur.SHA256] = cur
		}
		cur = DebianPackage{}
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // a continuation line (Description)
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Package":
			cur.Package = v
		case "Version":
			cur.Version = v
		case "Filename":
			cur.File = v
		case "SHA256":
			cur.SHA256 = v
		}
	}
	flush()
	return sc.Err()
}

// FetchDeb returns the cached .deb of p, fetching it from mirror (and
// checking its sha256) when the cache does not hold it yet.
func FetchDeb(ctx context.Context, c *cache.Cache, client *http.Client, mirror string, p DebianPackage) (string, error) {
	return fetchDeb(ctx, c, client, mirror, p)
}

func fetchDeb(ctx context.Context, c *cache.Cache, client *http.Client, mirror string, p DebianPackage) (string, error) {
	name := filepath.Base(p.File)
	dir, _, err := c.Fill(ctx, debCacheKind, p.SHA256, func(ctx context.Context, dir string) error {
		url := strings.TrimSuffix(mirror, "/") + "/" + p.File
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("fetch %s: %w", url, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
			return fmt.Errorf("%s %s is %w: %s answered %s", p.Package, p.Version, ErrDebGone, url, resp.Status)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("fetch %s: %s", url, resp.Status)
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(f, h), resp.Body); err != nil {
			return fmt.Errorf("fetch %s: %w", url, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
			return fmt.Errorf("%s from %s has sha256 %s, but the lock says %s: the mirror serves other content under this name; nothing was kept", name, url, got, p.SHA256)
		}
		return f.Close()
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h, _, err := v1.SHA256(f)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return h.Hex, nil
}

// debGoneHint is the fix for a locked .deb the archive dropped.
func debGoneHint(d DebianLayer) string {
	return fmt.Sprintf("the archive (%s, %s) has moved on since this layer was locked, and this build host never cached the file. "+
		"Either run `make pin` (or LockDebian) to lock what the archive holds now (the image's digest changes), "+
		"or set debian.mirror to an archive that keeps old files (a local mirror, or a snapshot such as "+
		"https://snapshot.debian.org/archive/debian/<YYYYMMDD>T000000Z/)", mirrorOf(d), d.Suite)
}

// missingFromLock lists the packages dpkg's status file records as
// installed that lock has no file for. A missing status file (nothing was
// installed) misses nothing.
func missingFromLock(status string, lock []DebianPackage) ([]string, error) {
	f, err := os.Open(status)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	locked := map[string]bool{}
	for _, p := range lock {
		locked[p.Package] = true
	}
	var missing []string
	var name string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			name = ""
		case strings.HasPrefix(line, "Package: "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "Package: "))
		case strings.HasPrefix(line, "Status: ") && strings.HasSuffix(line, " installed") && name != "" && !locked[name]:
			missing = append(missing, name)
		}
	}
	return missing, sc.Err()
}
