package registry

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// layoutStore serves a read-only OCI image layout. Its index.json is read
// once, when the store is opened. Every file is read through the layout's
// os.Root (layoutDir): nothing outside the directory, only regular files.
type layoutStore struct {
	dir *layoutDir
	cat *catalog
}

// Close lets go of the layout's directory: a store of a mounted slot
// holds it, and the slot cannot be unmounted whole (nor its partition
// written) while it does.
func (l *layoutStore) Close() error { return l.dir.Close() }

var (
	_ Store          = (*layoutStore)(nil)
	_ Lister         = (*layoutStore)(nil)
	_ ManifestLister = (*layoutStore)(nil)
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
	ld, err := openLayoutDir(dir)
	if err != nil {
		return nil, err
	}
	idx, _, err := readLayoutIndex(ld, indexMax)
	if err != nil {
		_ = ld.Close() // a directory, read only
		return nil, err
	}
	// The store keeps ld open for as long as it serves.
	l := &layoutStore{dir: ld, cat: newCatalog()}
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

// indexMax caps the index.json of the node's own layouts (the slot's
// bundle and the cache); side-loads have sideloadIndexMax.
const indexMax = 64 << 20

// readLayoutIndex checks the layout's oci-layout marker and parses its
// index.json, read up to limit bytes.
func readLayoutIndex(l *layoutDir, limit int64) (*v1.IndexManifest, []byte, error) {
	marker, err := l.readFile("oci-layout", sideloadManifestMax)
	if err != nil {
		return nil, nil, fmt.Errorf("open OCI layout %s: %w", l.dir, err)
	}
	var m struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(marker, &m); err != nil || m.Version == "" {
		return nil, nil, fmt.Errorf("open OCI layout %s: bad oci-layout file", l.dir)
	}
	raw, err := l.readFile("index.json", limit)
	if err != nil {
		return nil, nil, fmt.Errorf("open OCI layout %s: %w", l.dir, err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, nil, fmt.Errorf("open OCI layout %s: parse index.json: %w", l.dir, err)
	}
	return &idx, raw, nil
}

func (l *layoutStore) readManifest(h v1.Hash) ([]byte, error) {
	return l.dir.readVerified(h, maxManifestSize)
}

// Resolve implements Store.
func (l *layoutStore) Resolve(_ context.Context, repo, reference string) (v1.Descriptor, error) {
	return l.cat.resolve(repo, reference)
}

// Open implements Store.
func (l *layoutStore) Open(_ context.Context, digest v1.Hash) (*Content, error) {
	name, err := blobName(digest)
	if err != nil {
		return nil, err
	}
	return l.dir.open(name, -1)
}

// Repositories implements Lister.
func (l *layoutStore) Repositories(context.Context) ([]string, error) {
	return l.cat.repositories(), nil
}

// Tags implements Lister.
func (l *layoutStore) Tags(_ context.Context, repo string) ([]string, error) {
	return l.cat.tagsOf(repo)
}

// Manifests implements ManifestLister.
func (l *layoutStore) Manifests(_ context.Context, repo string) ([]v1.Descriptor, error) {
	return l.cat.manifestsOf(repo)
}

// String names the store in logs.
func (l *layoutStore) String() string { return "layout " + l.dir.dir }
