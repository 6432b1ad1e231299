package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Store is a source of image content.
//
// Resolve maps a full repository (including its registry host, e.g.
// "registry.k8s.io/pause") and a reference (a tag or a digest) to the
// descriptor of a manifest. Open returns the bytes of a manifest or blob by
// digest. Both return errors matching ErrNotFound when the content is absent.
type Store interface {
	Resolve(ctx context.Context, repo, reference string) (v1.Descriptor, error)
	Open(ctx context.Context, digest v1.Hash) (*Content, error)
}

// Lister is optionally implemented by a Store that can enumerate what it
// holds; the server uses it for name matching, tags/list and _catalog.
type Lister interface {
	Repositories(ctx context.Context) ([]string, error)
	Tags(ctx context.Context, repo string) ([]string, error)
}

// ManifestLister is optionally implemented by a Store that can list the
// manifests it resolves by digest under a repository. The server reads
// them to answer the referrers API: those whose subject is the digest
// asked about are its referrers.
type ManifestLister interface {
	Manifests(ctx context.Context, repo string) ([]v1.Descriptor, error)
}

// Content is an opened manifest or blob. The caller must Close it.
type Content struct {
	// Body reads the content. Stores backed by files return an *os.File,
	// which lets the server use sendfile.
	Body io.ReadSeekCloser
	// Size is the length of the content in bytes.
	Size int64
	// Path names the backing file, if any, for log messages.
	Path string
}

// Close closes the content's body.
func (c *Content) Close() error { return c.Body.Close() }

// maxManifestSize bounds manifests read into memory.
const maxManifestSize = 16 << 20

// Annotations recording an index.json entry's name.
const (
	annotationRefName       = "org.opencontainers.image.ref.name"
	annotationContainerdRef = "io.containerd.image.name"
	// annotationRepository marks a manifest recorded by digest only (no
	// tag) under a repository: in the cache's index.json, and for the
	// referrers a bundle carries (see layout.BundleRepositoryAnnotation).
	annotationRepository = layout.BundleRepositoryAnnotation
)

// parseDigest parses "algorithm:hex" and rejects algorithms we cannot hash.
func parseDigest(s string) (v1.Hash, error) {
	h, err := v1.NewHash(s)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("invalid digest %q: %w", s, err)
	}
	if _, err := v1.Hasher(h.Algorithm); err != nil {
		return v1.Hash{}, fmt.Errorf("invalid digest %q: %w", s, err)
	}
	return h, nil
}

// isDigestRef reports whether a manifest reference is a digest, not a tag.
func isDigestRef(ref string) bool { return strings.Contains(ref, ":") }

// splitRef splits "host/path:tag", "host/path@digest" or
// "host/path:tag@digest" into repository, tag and digest.
func splitRef(ref string) (repo, tag, digest string) {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref, digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref, tag = ref[:i], ref[i+1:]
	}
	return ref, tag, digest
}

// hostLike reports whether the first path element of a repository names a
// registry host, as in the Docker reference grammar.
func hostLike(first string) bool {
	return strings.ContainsAny(first, ".:") || first == "localhost"
}

// repoPath is a repository without its registry host ("library/nginx" for
// "docker.io/library/nginx"); a repository without a host is its own path.
func repoPath(repo string) string {
	first, rest, ok := strings.Cut(repo, "/")
	if ok && hostLike(first) {
		return rest
	}
	return repo
}

// sniffMediaType reads the mediaType field of a manifest, for content whose
// descriptor did not say.
func sniffMediaType(raw []byte) types.MediaType {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests []any           `json:"manifests"`
		Config    any             `json:"config"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return ""
	}
	switch {
	case m.MediaType != "":
		return m.MediaType
	case m.Manifests != nil:
		return types.OCIImageIndex
	case m.Config != nil:
		return types.OCIManifestSchema1
	}
	return ""
}

// isManifestType reports whether a media type is one we serve as a manifest.
func isManifestType(mt types.MediaType) bool { return mt.IsImage() || mt.IsIndex() }
