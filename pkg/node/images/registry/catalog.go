package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// catalog is the in-memory model of an OCI layout's index.json: which tags
// each repository has, and which manifests are reachable (and so resolvable
// by digest) under it. It is not safe for concurrent mutation.
type catalog struct {
	tags    map[string]map[string]v1.Descriptor  // repo → tag → manifest
	digests map[string]map[v1.Hash]v1.Descriptor // repo → reachable manifests
}

func newCatalog() *catalog {
	return &catalog{
		tags:    map[string]map[string]v1.Descriptor{},
		digests: map[string]map[v1.Hash]v1.Descriptor{},
	}
}

// readFunc returns a manifest's bytes, verified against its digest.
type readFunc func(v1.Hash) ([]byte, error)

// add records desc under repo (and tag, unless empty) together with every
// manifest reachable from it. raw, when not nil, is desc's content; child
// indexes are read with read. Whatever can be recorded is; the first error
// met while walking is returned.
func (c *catalog) add(repo, tag string, desc v1.Descriptor, raw []byte, read readFunc) error {
	if tag != "" {
		if c.tags[repo] == nil {
			c.tags[repo] = map[string]v1.Descriptor{}
		}
		c.tags[repo][tag] = desc
	}
	return c.walk(repo, desc, raw, read, map[v1.Hash]bool{})
}

func (c *catalog) walk(repo string, desc v1.Descriptor, raw []byte, read readFunc, seen map[v1.Hash]bool) error {
	if c.digests[repo] == nil {
		c.digests[repo] = map[v1.Hash]v1.Descriptor{}
	}
	c.digests[repo][desc.Digest] = stripDescriptor(desc)
	if seen[desc.Digest] || !desc.MediaType.IsIndex() {
		return nil
	}
	seen[desc.Digest] = true
	if raw == nil {
		var err error
		if raw, err = read(desc.Digest); err != nil {
			return fmt.Errorf("read index %s of %s: %w", desc.Digest, repo, err)
		}
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("parse index %s of %s: %w", desc.Digest, repo, err)
	}
	var errs []error
	for _, child := range idx.Manifests {
		if !isManifestType(child.MediaType) {
			continue
		}
		errs = append(errs, c.walk(repo, child, nil, read, seen))
	}
	return errors.Join(errs...)
}

// stripDescriptor keeps what a resolved manifest needs to be served.
func stripDescriptor(d v1.Descriptor) v1.Descriptor {
	return v1.Descriptor{MediaType: d.MediaType, Size: d.Size, Digest: d.Digest}
}

// resolve maps repo and a tag or digest to a manifest descriptor.
func (c *catalog) resolve(repo, ref string) (v1.Descriptor, error) {
	byDigest, ok := c.digests[repo]
	if !ok {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", repo, ErrUnknownRepository)
	}
	if isDigestRef(ref) {
		h, err := parseDigest(ref)
		if err != nil {
			return v1.Descriptor{}, err
		}
		if d, ok := byDigest[h]; ok {
			return d, nil
		}
		return v1.Descriptor{}, fmt.Errorf("manifest %s@%s: %w", repo, ref, ErrNotFound)
	}
	if d, ok := c.tags[repo][ref]; ok {
		return d, nil
	}
	return v1.Descriptor{}, fmt.Errorf("manifest %s:%s: %w", repo, ref, ErrNotFound)
}

func (c *catalog) repositories() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for r := range c.digests {
			if !yield(r) {
				return
			}
		}
	})
}

func (c *catalog) tagsOf(repo string) ([]string, error) {
	if _, ok := c.digests[repo]; !ok {
		return nil, fmt.Errorf("%s: %w", repo, ErrUnknownRepository)
	}
	tags := make([]string, 0, len(c.tags[repo]))
	for t := range c.tags[repo] {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return tags, nil
}

// manifestsOf lists the manifests resolvable by digest under repo, by
// digest.
func (c *catalog) manifestsOf(repo string) ([]v1.Descriptor, error) {
	byDigest, ok := c.digests[repo]
	if !ok {
		return nil, fmt.Errorf("%s: %w", repo, ErrUnknownRepository)
	}
	out := slices.Collect(maps.Values(byDigest))
	slices.SortFunc(out, func(a, b v1.Descriptor) int { return strings.Compare(a.Digest.String(), b.Digest.String()) })
	return out, nil
}

// entryName is one name an index.json entry is recorded under.
type entryName struct{ repo, tag string }

// entryNames reads the names an index.json entry carries in its annotations.
// A bare tag in org.opencontainers.image.ref.name (allowed by the image
// spec, but useless without a repository) is ignored.
func entryNames(desc v1.Descriptor) []entryName {
	var names []entryName
	for _, key := range []string{annotationRefName, annotationContainerdRef} {
		v := desc.Annotations[key]
		if v == "" || !strings.ContainsAny(v, "/:@") {
			continue
		}
		repo, tag, _ := splitRef(v)
		if repo == "" {
			continue
		}
		n := entryName{repo: repo, tag: tag}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if repo := desc.Annotations[annotationRepository]; repo != "" && len(names) == 0 {
		names = append(names, entryName{repo: repo})
	}
	return names
}

// blobPath is where a layout keeps the blob with digest h.
func blobPath(dir string, h v1.Hash) (string, error) {
	if err := checkHash(h); err != nil {
		return "", err
	}
	return filepath.Join(dir, "blobs", h.Algorithm, h.Hex), nil
}

// checkHash rejects digests that could not name a blob file.
func checkHash(h v1.Hash) error {
	if _, err := parseDigest(h.String()); err != nil {
		return err
	}
	return nil
}

// openFile opens a blob file as Content.
func openFile(path string) (*Content, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // read only
		return nil, fmt.Errorf("stat blob: %w", err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close() // read only
		return nil, fmt.Errorf("blob %s is not a regular file: %w", path, ErrNotFound)
	}
	return &Content{Body: f, Size: fi.Size(), Path: path}, nil
}

// readVerified reads a whole (manifest-sized) file and checks it against h.
func readVerified(path string, h v1.Hash) ([]byte, error) {
	c, err := openFile(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if c.Size > maxManifestSize {
		return nil, fmt.Errorf("%s: %d bytes is too large for a manifest", path, c.Size)
	}
	raw, err := io.ReadAll(c.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := matchDigest(bytes.NewReader(raw), h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return raw, nil
}
