package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// layoutStore serves a read-only OCI image layout. Its index.json is read
// once, when the store is opened.
type layoutStore struct {
	dir string
	cat *catalog
}

var (
	_ Store  = (*layoutStore)(nil)
	_ Lister = (*layoutStore)(nil)
)

// OpenLayout opens the OCI image layout in dir as a read-only Store (which
// is also a Lister). Each index.json entry is recorded under the repository
// and tag named by its org.opencontainers.image.ref.name or
// io.containerd.image.name annotation (a full reference such as
// "registry.k8s.io/pause:3.10"); manifests reachable from it through image
// indexes are resolvable by digest under the same repository. Entries
// without a name, and indexes that cannot be read, are logged and skipped.
func OpenLayout(dir string, opts ...Option) (Store, error) {
	o, err := storeOptions(opts, "OpenLayout")
	if err != nil {
		return nil, err
	}
	idx, err := readLayoutIndex(dir)
	if err != nil {
		return nil, err
	}
	l := &layoutStore{dir: dir, cat: newCatalog()}
	for _, e := range idx.Manifests {
		names := entryNames(e)
		if len(names) == 0 {
			o.log.Debug("registry: layout entry has no name; skipped", "layout", dir, "digest", e.Digest)
			continue
		}
		for _, n := range names {
			if err := l.cat.add(n.repo, n.tag, e, nil, l.readManifest); err != nil {
				o.log.Warn("registry: layout entry is incomplete", "layout", dir, "repository", n.repo, "tag", n.tag, "err", err)
			}
		}
	}
	return l, nil
}

// readLayoutIndex checks dir's oci-layout marker and parses its index.json.
func readLayoutIndex(dir string) (*v1.IndexManifest, error) {
	marker, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	var m struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(marker, &m); err != nil || m.Version == "" {
		return nil, fmt.Errorf("open OCI layout %s: bad oci-layout file", dir)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("open OCI layout %s: parse index.json: %w", dir, err)
	}
	return &idx, nil
}

func (l *layoutStore) readManifest(h v1.Hash) ([]byte, error) {
	p, err := blobPath(l.dir, h)
	if err != nil {
		return nil, err
	}
	return readVerified(p, h)
}

// Resolve implements Store.
func (l *layoutStore) Resolve(_ context.Context, repo, reference string) (v1.Descriptor, error) {
	return l.cat.resolve(repo, reference)
}

// Open implements Store.
func (l *layoutStore) Open(_ context.Context, digest v1.Hash) (*Content, error) {
	p, err := blobPath(l.dir, digest)
	if err != nil {
		return nil, err
	}
	return openFile(p)
}

// Repositories implements Lister.
func (l *layoutStore) Repositories(context.Context) ([]string, error) {
	return l.cat.repositories(), nil
}

// Tags implements Lister.
func (l *layoutStore) Tags(_ context.Context, repo string) ([]string, error) {
	return l.cat.tagsOf(repo)
}

// String names the store in logs.
func (l *layoutStore) String() string { return "layout " + l.dir }
