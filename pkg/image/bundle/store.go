package bundle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
)

// KeyAnnotation marks each entry of the cache layout's index.json with the
// key of the recipe (source, platforms, build inputs) that produced it.
const KeyAnnotation = "dev.terrarium.bundle.key"

// referrerAnnotation marks the cache layout's entries that are referrers
// of the image with the same KeyAnnotation.
const referrerAnnotation = "dev.terrarium.bundle.referrer"

// store is the cache: an OCI image layout whose index.json maps recipe keys
// to manifests. Blobs are content-addressed and written atomically, so
// several processes may fill it at once; index.json is only touched under
// an exclusive lock on <dir>/.lock.
type store struct {
	dir string
}

func openStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	s := &store{dir: dir}
	err := s.locked(func() error {
		if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
			return nil
		}
		_, err := layout.Write(dir, empty.Index)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	return s, nil
}

// locked runs fn holding the cache's lock.
func (s *store) locked(fn func() error) error {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too
	return fn()
}

// lookup returns the artifact stored under key, with its referrers, when
// it and all their blobs are present.
func (s *store) lookup(key string) (artifact, bool, error) {
	var found *v1.Descriptor
	var referrers []v1.Descriptor
	err := s.locked(func() error {
		idx, err := layout.Path(s.dir).ImageIndex()
		if err != nil {
			return err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return err
		}
		for i, d := range im.Manifests {
			switch {
			case d.Annotations[KeyAnnotation] != key:
			case d.Annotations[referrerAnnotation] != "":
				referrers = append(referrers, d)
			default:
				found = &im.Manifests[i]
			}
		}
		return nil
	})
	if err != nil || found == nil {
		return artifact{}, false, wrapCache(s.dir, err)
	}
	a, err := s.load(*found, referrers)
	if err != nil {
		return artifact{}, false, nil // damaged entry: resolve again
	}
	bs, err := a.allBlobs()
	if err != nil || !present(s.dir, bs) {
		return artifact{}, false, nil
	}
	return a, true, nil
}

func wrapCache(dir string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cache %s: %w", dir, err)
}

// present reports whether every blob is in the layout at dir with its size.
func present(dir string, bs []blob) bool {
	for _, b := range bs {
		fi, err := os.Stat(filepath.Join(dir, "blobs", b.digest.Algorithm, b.digest.Hex))
		if err != nil || fi.Size() != b.size {
			return false
		}
	}
	return true
}

// put copies the artifact and its referrers into the cache under key and
// returns them read back from the cache.
func (s *store) put(ctx context.Context, key string, a artifact, progress func(done, total int64)) (artifact, error) {
	bs, err := a.allBlobs()
	if err != nil {
		return artifact{}, err
	}
	if err := copyBlobs(ctx, s.dir, bs, progress); err != nil {
		return artifact{}, err
	}
	desc, err := a.descriptor()
	if err != nil {
		return artifact{}, err
	}
	desc.Annotations = map[string]string{KeyAnnotation: key}
	referrers := make([]v1.Descriptor, 0, len(a.referrers))
	for _, r := range a.referrers {
		rd, err := r.descriptor()
		if err != nil {
			return artifact{}, fmt.Errorf("referrer: %w", err)
		}
		rd.Annotations = map[string]string{KeyAnnotation: key, referrerAnnotation: "true"}
		referrers = append(referrers, rd)
	}
	err = s.locked(func() error {
		p := layout.Path(s.dir)
		if err := p.RemoveDescriptors(match.Annotation(KeyAnnotation, key)); err != nil {
			return err
		}
		for _, d := range append([]v1.Descriptor{desc}, referrers...) {
			if err := p.AppendDescriptor(d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return artifact{}, wrapCache(s.dir, err)
	}
	return s.load(desc, referrers)
}

// load opens the artifact of an index.json entry, with the referrers the
// cache keeps for it.
func (s *store) load(desc v1.Descriptor, referrers []v1.Descriptor) (artifact, error) {
	idx, err := layout.Path(s.dir).ImageIndex()
	if err != nil {
		return artifact{}, wrapCache(s.dir, err)
	}
	a, err := artifactOf(idx, desc)
	if err != nil {
		return artifact{}, wrapCache(s.dir, fmt.Errorf("%s: %w", desc.Digest, err))
	}
	for _, rd := range referrers {
		r, err := artifactOf(idx, rd)
		if err != nil {
			return artifact{}, wrapCache(s.dir, fmt.Errorf("referrer %s of %s: %w", rd.Digest, desc.Digest, err))
		}
		a.referrers = append(a.referrers, r)
	}
	return a, nil
}

// artifactOf opens the image or index an index.json entry names.
func artifactOf(idx v1.ImageIndex, desc v1.Descriptor) (artifact, error) {
	var a artifact
	var err error
	switch {
	case desc.MediaType.IsIndex():
		a.index, err = idx.ImageIndex(desc.Digest)
	case desc.MediaType.IsImage():
		a.image, err = idx.Image(desc.Digest)
	default:
		err = fmt.Errorf("unsupported media type %q", desc.MediaType)
	}
	return a, err
}
