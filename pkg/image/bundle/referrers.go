package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Referrer is an artifact whose subject is a manifest of a resolved image
// (a signature, an SBOM, an attestation, as cosign and notation write them
// in their OCI 1.1 form). WriteLayout carries it into the layout with its
// image, where the node's registry lists it through the referrers API.
// Exactly one of Image and Index is set.
type Referrer struct {
	Image v1.Image
	Index v1.ImageIndex
}

func (r Referrer) artifact() artifact { return artifact{image: r.Image, index: r.Index} }

// manifestMax bounds a manifest of a source layout read to find its
// subject: as large as a manifest a node takes from a side-load disk.
const manifestMax = 4 << 20

// layoutEntry is an index.json entry of a source layout with the subject
// its manifest names (nil: none, or not a manifest).
type layoutEntry struct {
	desc    v1.Descriptor
	subject *v1.Hash
}

// readEntries reads the subject of each manifest an index.json lists.
func readEntries(p layout.Path, ds []v1.Descriptor) ([]layoutEntry, error) {
	out := make([]layoutEntry, 0, len(ds))
	for _, d := range ds {
		e := layoutEntry{desc: d}
		if d.MediaType.IsImage() || d.MediaType.IsIndex() {
			raw, err := readManifest(p, d)
			if err == nil {
				e.subject, err = subjectOf(raw)
			}
			if err != nil {
				return nil, fmt.Errorf("entry %s: %w", d.Digest, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// readManifest reads the manifest d names, up to manifestMax bytes.
func readManifest(p layout.Path, d v1.Descriptor) ([]byte, error) {
	if d.Size > manifestMax {
		return nil, fmt.Errorf("a manifest of %d bytes, more than %d", d.Size, manifestMax)
	}
	rc, err := p.Blob(d.Digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, manifestMax+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > manifestMax {
		return nil, fmt.Errorf("a manifest of more than %d bytes", manifestMax)
	}
	return raw, nil
}

// subjectOf reads the subject of a manifest (an image manifest or an
// index): nil when it has none.
func subjectOf(raw []byte) (*v1.Hash, error) {
	var m struct {
		Subject *struct {
			Digest v1.Hash `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	if m.Subject == nil {
		return nil, nil
	}
	if m.Subject.Digest == (v1.Hash{}) {
		return nil, errors.New("its subject has no digest")
	}
	return &m.Subject.Digest, nil
}

// notReferrers are the entries that refer to nothing: the images a layout
// holds, among which one without a name is picked.
func notReferrers(entries []layoutEntry) []v1.Descriptor {
	var out []v1.Descriptor
	for _, e := range entries {
		if e.subject == nil {
			out = append(out, e.desc)
		}
	}
	return out
}

// referrersOf picks, among a layout's entries, the artifacts whose subject
// is one of a's manifests, and in turn those whose subject is one of
// theirs (a signature of an SBOM), each once, in index.json's order pass by
// pass. A referrer is taken as the layout has it: its platforms are not
// narrowed.
func referrersOf(idx v1.ImageIndex, entries []layoutEntry, a artifact) ([]artifact, error) {
	subjects, err := a.manifestDigests()
	if err != nil {
		return nil, err
	}
	taken := map[v1.Hash]bool{}
	var out []artifact
	for grew := true; grew; {
		grew = false
		for _, e := range entries {
			if e.subject == nil || taken[e.desc.Digest] || !subjects[*e.subject] {
				continue
			}
			r, err := artifactOf(idx, e.desc)
			if err != nil {
				return nil, fmt.Errorf("referrer %s of %s: %w", e.desc.Digest, e.subject, err)
			}
			taken[e.desc.Digest], subjects[e.desc.Digest] = true, true
			out = append(out, r)
			grew = true
		}
	}
	return out, nil
}

// manifestDigests are the digests of the artifact's manifests: its own
// and, for an index, those of every manifest under it.
func (a artifact) manifestDigests() (map[v1.Hash]bool, error) {
	out := map[v1.Hash]bool{}
	var walk func(a artifact) error
	walk = func(a artifact) error {
		d, err := a.descriptor()
		if err != nil {
			return err
		}
		out[d.Digest] = true
		if a.index == nil {
			return nil
		}
		im, err := a.index.IndexManifest()
		if err != nil {
			return fmt.Errorf("index %s: %w", d.Digest, err)
		}
		for _, c := range im.Manifests {
			out[c.Digest] = true
			if !c.MediaType.IsIndex() {
				continue
			}
			ci, err := a.index.ImageIndex(c.Digest)
			if err != nil {
				return fmt.Errorf("index %s: %w", c.Digest, err)
			}
			if err := walk(artifact{index: ci}); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(a)
}

// artifactType is what the referrers API lists as the artifact's type:
// its manifest's artifactType, else an image manifest's config media
// type.
func (a artifact) artifactType() (string, error) {
	if a.index != nil {
		im, err := a.index.IndexManifest()
		if err != nil {
			return "", fmt.Errorf("index manifest: %w", err)
		}
		return im.ArtifactType, nil
	}
	m, err := a.image.Manifest()
	if err != nil {
		return "", fmt.Errorf("image manifest: %w", err)
	}
	if m.ArtifactType != "" {
		return m.ArtifactType, nil
	}
	return string(m.Config.MediaType), nil
}

// allBlobs lists the distinct blobs of the artifact and of its referrers.
func (a artifact) allBlobs() ([]blob, error) {
	bs, err := a.blobs()
	if err != nil {
		return nil, err
	}
	seen := map[v1.Hash]bool{}
	for _, b := range bs {
		seen[b.digest] = true
	}
	for _, r := range a.referrers {
		rbs, err := r.blobs()
		if err != nil {
			return nil, fmt.Errorf("referrer: %w", err)
		}
		for _, b := range rbs {
			if !seen[b.digest] {
				seen[b.digest] = true
				bs = append(bs, b)
			}
		}
	}
	return bs, nil
}

// referrerList is the artifact's referrers as a Resolved carries them.
func (a artifact) referrerList() []Referrer {
	if len(a.referrers) == 0 {
		return nil
	}
	out := make([]Referrer, len(a.referrers))
	for i, r := range a.referrers {
		out[i] = Referrer{Image: r.image, Index: r.index}
	}
	return out
}
