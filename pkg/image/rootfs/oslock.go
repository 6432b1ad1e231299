package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// OSLock pins a root filesystem's Debian packages: the exact .deb files
// mmdebstrap's minbase variant installs for the spec's os.packages, as
// resolved in the archive on one day (`imagebuild os lock`, part of `make
// pin`). A base built from a lock installs these files, fetched by their
// sha256 and kept in the cache, from a local repository: the same lock
// gives the same base on any day, whatever the archive holds by then.
type OSLock struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Suite      string `yaml:"suite"`
	Mirror     string `yaml:"mirror"`
	// Packages is the request the lock was resolved for: os.packages,
	// sorted.
	Packages []string `yaml:"packages"`
	// Lock is every .deb file, sorted by package.
	Lock []bundle.DebianPackage `yaml:"lock"`
}

// OSLockKind is the kind of an OS lock document.
const OSLockKind = "DebianLock"

var (
	mirrorRE = regexp.MustCompile(`^https?://[A-Za-z0-9._~:/%@-]+$`)
	suiteRE  = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// LockOS resolves o's packages in o's mirror as the archive is now.
func LockOS(ctx context.Context, o spec.OS, log *slog.Logger) (*OSLock, error) {
	pkgs := sortedPackages(o)
	lock, err := bundle.LockPackages(ctx, o.Suite, o.Mirror, pkgs, "minbase", log)
	if err != nil {
		return nil, err
	}
	return &OSLock{APIVersion: spec.APIVersion, Kind: OSLockKind, Suite: o.Suite, Mirror: o.Mirror, Packages: pkgs, Lock: lock}, nil
}

// WriteOSLock writes l to path, whole or not at all.
func WriteOSLock(path string, l *OSLock) error {
	b, err := yaml.Marshal(l)
	if err != nil {
		return err
	}
	head := "# The exact Debian packages of the root filesystem: written by `imagebuild os lock` (make pin); do not edit.\n"
	return atomicfile.WriteFile(path, append([]byte(head), b...), 0o644)
}

// ReadOSLock reads and checks an OS lock file.
func ReadOSLock(path string) (*OSLock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the OS lock (os.lock; `imagebuild os lock` writes it): %w", err)
	}
	var l OSLock
	if err := strictyaml.Unmarshal(data, &l); err != nil {
		if p, ok := errors.AsType[strictyaml.Problems](err); ok {
			return nil, p.WithFile(path)
		}
		return nil, fmt.Errorf("OS lock %s: %w", path, err)
	}
	var p strictyaml.Problems
	root := strictyaml.Root()
	if l.APIVersion != spec.APIVersion || l.Kind != OSLockKind {
		p.Addf(root.Field("kind"), "is %s %s; an OS lock is %s %s", l.APIVersion, l.Kind, spec.APIVersion, OSLockKind)
	}
	if len(l.Lock) == 0 {
		p.Addf(root.Field("lock"), "lists no .deb file; write the lock again with `imagebuild os lock`")
	}
	// Both go into the image's sources.list through a shell hook.
	if !mirrorRE.MatchString(l.Mirror) {
		p.Addf(root.Field("mirror"), "%q is not an http(s) URL of a Debian archive", l.Mirror)
	}
	if !suiteRE.MatchString(l.Suite) {
		p.Addf(root.Field("suite"), "%q is not a Debian suite name", l.Suite)
	}
	for i, e := range l.Lock {
		if b, err := hex.DecodeString(e.SHA256); err != nil || len(b) != sha256.Size {
			p.Addf(root.Field("lock").Index(i).Field("sha256"), "%q is not a sha256", e.SHA256)
		}
		if e.Package == "" || e.Version == "" || !strings.HasPrefix(e.File, "pool/") || !strings.HasSuffix(e.File, ".deb") || strings.Contains(e.File, "..") {
			p.Addf(root.Field("lock").Index(i), "needs a package, a version and a file under pool/ ending in .deb")
		}
	}
	if err := p.Err(); err != nil {
		return nil, p.WithLines(data).WithFile(path)
	}
	return &l, nil
}

// Matches reports whether l was resolved for o: the same suite and
// packages. A lock for other packages is stale.
func (l *OSLock) Matches(o spec.OS) error {
	if l.Suite != o.Suite || !slices.Equal(l.Packages, sortedPackages(o)) {
		return fmt.Errorf("the OS lock was resolved for %s %v, and the spec asks for %s %v: write it again with `make pin` (or `imagebuild os lock`)",
			l.Suite, l.Packages, o.Suite, sortedPackages(o))
	}
	return nil
}

// key is the lock's content in a base's cache key: every file's sha256.
func (l *OSLock) key() []string {
	out := make([]string, len(l.Lock))
	for i, e := range l.Lock {
		out[i] = e.Package + "=" + e.SHA256
	}
	return out
}

// localRepo makes a flat Debian repository in dir of the lock's .deb files
// (fetched into the cache by their sha256, checked), with a Packages index
// made from each file's own control data and an unsigned Release, and
// returns the sources line mmdebstrap installs from.
func localRepo(ctx context.Context, c *cache.Cache, l *OSLock, dir string, epoch time.Time) (string, error) {
	client := &http.Client{Timeout: 10 * time.Minute}
	var index bytes.Buffer
	for i, e := range l.Lock {
		deb, err := bundle.FetchDeb(ctx, c, client, l.Mirror, e)
		if err != nil {
			return "", fmt.Errorf("os.lock[%d] %s: %w", i, e.Package, err)
		}
		name := filepath.Base(e.File)
		if err := linkOrCopy(deb, filepath.Join(dir, name)); err != nil {
			return "", err
		}
		control, err := exec.CommandContext(ctx, "dpkg-deb", "--field", deb).Output()
		if err != nil {
			return "", fmt.Errorf("os.lock[%d] %s: read its control data (dpkg-deb): %w", i, e.Package, err)
		}
		fi, err := os.Stat(deb)
		if err != nil {
			return "", err
		}
		index.Write(bytes.TrimRight(control, "\n"))
		fmt.Fprintf(&index, "\nFilename: ./%s\nSize: %d\nSHA256: %s\n\n", name, fi.Size(), e.SHA256)
	}
	if err := os.WriteFile(filepath.Join(dir, "Packages"), index.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(index.Bytes())
	release := fmt.Sprintf("Origin: Terrarium\nLabel: OS lock\nSuite: %s\nCodename: %s\nDate: %s\nArchitectures: amd64\nSHA256:\n %x %d Packages\n",
		l.Suite, l.Suite, epoch.UTC().Format(time.RFC1123), sum, index.Len())
	if err := os.WriteFile(filepath.Join(dir, "Release"), []byte(release), 0o644); err != nil {
		return "", err
	}
	// copy://: mmdebstrap copies the files into the chroot (a file://
	// repository outside it cannot be read from inside).
	return "deb [trusted=yes] copy://" + dir + " ./", nil
}

// checkInstalled compares what the base installed (versions: package ->
// version, from dpkg) with the lock: every locked file's package at its
// version, and nothing else.
func (l *OSLock) checkInstalled(versions map[string]string) error {
	var problems []string
	locked := map[string]bool{}
	for _, e := range l.Lock {
		locked[e.Package] = true
		if v, ok := versions[e.Package]; !ok {
			problems = append(problems, e.Package+" "+e.Version+" is locked but not installed")
		} else if v != e.Version {
			problems = append(problems, e.Package+" is installed at "+v+", locked at "+e.Version)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(versions)) {
		if !locked[p] {
			problems = append(problems, p+" "+versions[p]+" is installed but not locked")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the base differs from its OS lock (write it again with `make pin`):\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// packageNames are the lock's packages: mmdebstrap is asked for every one,
// so that what it installs does not depend on the priorities the files'
// own control data give (the archive's overrides may differ).
func (l *OSLock) packageNames() []string {
	out := make([]string, len(l.Lock))
	for i, e := range l.Lock {
		out[i] = e.Package
	}
	return out
}

// linkOrCopy puts src at dst: a hard link when both are on one
// filesystem, else a copy.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// lockNote says, for the log, how a base is made.
func lockNote(l *OSLock) string {
	if l == nil {
		return "resolved in the archive today"
	}
	return "from the OS lock (" + strconv.Itoa(len(l.Lock)) + " files)"
}
