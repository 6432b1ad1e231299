package upgradeshare

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// File is an artifact's upgrade file, read byte for byte from the
// share's blobs: the file a stick held, for upgrade.Open.
type File struct {
	io.ReaderAt
	size  int64
	name  string
	files []*os.File
}

// Size is the file's size.
func (f *File) Size() int64 { return f.size }

// Name names the file as a stick's would be: terrarium-<version>.upgrade.
func (f *File) Name() string { return f.name }

// Close closes the blobs.
func (f *File) Close() error {
	var errs []error
	for _, b := range f.files {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}

// Open opens the upgrade file of artifact a, which the share holds (Find,
// Fetch or Add returned it). Its parts are the blobs named by their
// digests; a layer that names a part otherwise than the signed manifest
// does is refused here, and whatever else differs, Verify or the
// installer's checks find.
func (s *Share) Open(a Artifact) (*File, error) {
	f := &File{name: "terrarium-" + a.Version + ".upgrade"}
	if err := s.open(a, f); err != nil {
		_ = f.Close() // read only
		return nil, fmt.Errorf("open upgrade %s in the share: %w", a.Version, err)
	}
	return f, nil
}

func (s *Share) open(a Artifact, f *File) error {
	if a.whole() {
		b, err := os.Open(s.blobPath(a.layers[0].Digest))
		if err != nil {
			return err
		}
		f.files = append(f.files, b)
		f.ReaderAt, f.size = b, a.layers[0].Size
		return nil
	}
	if len(a.layers) < 3 {
		return fmt.Errorf("%d layers, not a manifest, its signature and parts", len(a.layers))
	}
	manifest, err := readSmall(s.blobPath(a.layers[0].Digest), upgrade.MaxManifestSize)
	if err != nil {
		return err
	}
	sig, err := readSmall(s.blobPath(a.layers[1].Digest), signature.MaxFileSize)
	if err != nil {
		return err
	}
	parts := a.layers[2:]
	used := 0
	r, size, err := upgrade.Assemble(manifest, sig, func(p upgrade.PartInfo) (io.ReaderAt, error) {
		if used >= len(parts) {
			return nil, fmt.Errorf("the artifact has %d parts and its signed manifest more", len(parts))
		}
		l := parts[used]
		used++
		if title := l.Annotations[titleAnnotation]; title != p.Name || l.Digest.Hex != p.SHA256 || l.Size != p.Size {
			return nil, fmt.Errorf("the artifact's part %d is %s (%s, %d bytes), and its signed manifest's %s (sha256:%s, %d bytes)",
				used, title, l.Digest, l.Size, p.Name, p.SHA256, p.Size)
		}
		b, err := os.Open(s.blobPath(l.Digest))
		if err != nil {
			return nil, err
		}
		f.files = append(f.files, b)
		return b, nil
	})
	if err != nil {
		return err
	}
	if used != len(parts) {
		return fmt.Errorf("the artifact has %d parts and its signed manifest %d", len(parts), used)
	}
	f.ReaderAt, f.size = r, size
	return nil
}
