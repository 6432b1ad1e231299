package upgradeshare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Peers fetches from other nodes' registries (pkg/node/images/registry.Fetcher).
type Peers interface {
	Manifest(ctx context.Context, repo string, d v1.Hash) (raw []byte, peer string, err error)
	Blob(ctx context.Context, peer, repo string, d v1.Hash) (io.ReadCloser, int64, error)
	// Peers names every peer, as Manifest names one.
	Peers() []string
}

// Fetch makes sure the share holds the artifact whose manifest has digest
// manifest, fetching it from a peer that serves it when it does not: the
// manifest (checked against its digest and refused unless it is an
// upgrade artifact of at most MaxFileSize), then each of its blobs the
// share does not hold yet, each checked against its digest before it is
// kept, and the artifact is named in the index only once it holds them
// all. What a peer sends that does not match is not kept; blobs that did
// match stay for the next try, which fetches only what is missing. Blobs
// that would leave less than the reserve free (WithSpace) are refused
// before they are fetched. The upgrade file's own signature, and its parts
// against it, are for the installer to check.
func (s *Share) Fetch(ctx context.Context, peers Peers, manifest v1.Hash) (Artifact, error) {
	if a, ok := s.Find(manifest); ok {
		return a, nil
	}
	raw, peer, err := peers.Manifest(ctx, layout.UpgradeRepository, manifest)
	if err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s: %w", manifest, err)
	}
	a, err := parseManifest(raw)
	if err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s from %s: %w", manifest, peer, err)
	}
	// What an earlier fetch of another artifact left is no longer
	// wanted; what one of this artifact left is not fetched again.
	if err := s.sweep(a.layers...); err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s: %w", a.Version, err)
	}
	var missing []v1.Descriptor
	var need int64
	for _, l := range a.layers {
		if !s.holds(l) && !slices.ContainsFunc(missing, func(m v1.Descriptor) bool { return m.Digest == l.Digest }) {
			missing = append(missing, l)
			need += l.Size
		}
	}
	if err := s.checkSpace(a.Version, need); err != nil {
		return Artifact{}, fmt.Errorf("fetch upgrade %s from %s: %w", a.Version, peer, err)
	}
	for _, l := range missing {
		if err := s.fetchBlob(ctx, peers, peer, l); err != nil {
			return Artifact{}, fmt.Errorf("fetch upgrade %s from %s: %s: %w", a.Version, peer, l.Annotations[titleAnnotation], err)
		}
	}
	return s.recordManifest(raw, manifest, a)
}

// fetchBlob fetches the blob of l from peer, kept only if it matches; a
// peer that sends one that does not (its registry serves the share as it
// is on disk) is passed over for the next.
func (s *Share) fetchBlob(ctx context.Context, peers Peers, peer string, l v1.Descriptor) error {
	order := []string{peer}
	for _, p := range peers.Peers() {
		if p != peer {
			order = append(order, p)
		}
	}
	var errs []error
	for _, p := range order {
		err := s.fetchBlobFrom(ctx, peers, p, l)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("from %s: %w", p, err))
		if !errors.Is(err, ErrDigest) {
			break
		}
	}
	return errors.Join(errs...)
}

func (s *Share) fetchBlobFrom(ctx context.Context, peers Peers, peer string, l v1.Descriptor) error {
	body, _, err := peers.Blob(ctx, peer, layout.UpgradeRepository, l.Digest)
	if err != nil {
		return err
	}
	defer body.Close()
	_, _, err = s.putBlob(ctx, body, &l.Digest, l.Size)
	return err
}

// recordManifest keeps a fetched manifest as the peer served it (so its
// digest stays the rollout's) and names it in the index.
func (s *Share) recordManifest(raw []byte, manifest v1.Hash, a Artifact) (Artifact, error) {
	if _, _, err := s.putBlob(context.Background(), bytes.NewReader(raw), &manifest, int64(len(raw))); err != nil {
		return Artifact{}, err
	}
	if _, _, err := s.putBlob(context.Background(), bytes.NewReader([]byte(emptyJSON)), nil, 2); err != nil {
		return Artifact{}, err
	}
	if err := s.index(manifest, int64(len(raw)), a.Version); err != nil {
		return Artifact{}, err
	}
	a.Manifest = manifest
	return a, nil
}
