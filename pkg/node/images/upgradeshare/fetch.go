package upgradeshare

import (
	"bytes"
	"context"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Peers fetches from other nodes' registries (pkg/node/images/registry.Fetcher).
type Peers interface {
	Manifest(ctx context.Context, repo string, d v1.Hash) (raw []byte, peer string, err error)
	Blob(ctx context.Context, peer, repo string, d v1.Hash) (io.ReadCloser, int64, error)
}

// Fetch makes sure the share holds the artifact whose manifest has digest
// manifest, fetching it from a peer that serves it when it does not: the
// manifest (checked against its digest and refused unless it is an
// upgrade artifact of at most MaxFileSize), then the upgrade file,
// checked against the manifest's digest of it before it is named in the
// index. What a peer sends that does not match is not kept. A file that
// would leave less than the reserve free (WithSpace) is refused before it
// is fetched. The upgrade file's own signature is for the installer to
// check.
func (s *Share) Fetch(ctx context.Context, peers Peers, manifest v1.Hash) (Artifact, error) {
	if a, ok := s.Find(manifest); ok {
		return a, nil
	}
	raw, peer, err := peers.Manifest(ctx, layout.UpgradeRepository, manifest)
	if err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s: %w", manifest, err)
	}
	file, version, err := parseManifest(raw)
	if err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s from %s: %w", manifest, peer, err)
	}
	if err := s.checkSpace(version, file.Size); err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s from %s: %w", version, peer, err)
	}
	body, _, err := peers.Blob(ctx, peer, layout.UpgradeRepository, file.Digest)
	if err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s: %w", version, err)
	}
	defer body.Close()
	if _, _, err := s.putBlob(ctx, body, &file.Digest, file.Size); err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s from %s: its file: %w", version, peer, err)
	}
	return s.recordManifest(raw, manifest, file, version)
}

// recordManifest keeps a fetched manifest as the peer served it (so its
// digest stays the rollout's) and names it in the index.
func (s *Share) recordManifest(raw []byte, manifest v1.Hash, file v1.Descriptor, version string) (Artifact, error) {
	if _, _, err := s.putBlob(context.Background(), bytes.NewReader(raw), &manifest, int64(len(raw))); err != nil {
		return Artifact{}, err
	}
	if _, _, err := s.putBlob(context.Background(), bytes.NewReader([]byte(emptyJSON)), nil, 2); err != nil {
		return Artifact{}, err
	}
	if err := s.index(manifest, int64(len(raw)), version); err != nil {
		return Artifact{}, err
	}
	return Artifact{Manifest: manifest, File: file.Digest, Size: file.Size, Version: version}, nil
}
