package upgradeshare

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// Media types of the artifact.
const (
	// ArtifactType is the manifest's artifactType.
	ArtifactType = "application/vnd.terrarium.upgrade.v1"
	// ManifestMediaType is the first layer's: the upgrade file's
	// manifest.json, SignatureMediaType the second's: its
	// manifest.json.sig, and PartMediaType each part's, in the manifest's
	// order, each titled with its member name.
	ManifestMediaType  types.MediaType = "application/vnd.terrarium.upgrade.v1.manifest+json"
	SignatureMediaType types.MediaType = "application/vnd.terrarium.upgrade.v1.signature"
	PartMediaType      types.MediaType = "application/vnd.terrarium.upgrade.v1.part"
	// FileMediaType is the one layer of an artifact that earlier versions
	// made: the upgrade file whole. The share still reads, fetches and
	// serves one.
	FileMediaType types.MediaType = "application/vnd.terrarium.upgrade.v1.file"
	// emptyMediaType and emptyJSON are OCI's empty descriptor.
	emptyMediaType types.MediaType = "application/vnd.oci.empty.v1+json"
	emptyJSON      string          = "{}"
)

// titleAnnotation names a layer: a part's member name.
const titleAnnotation = "org.opencontainers.image.title"

// MaxFileSize bounds an upgrade file fetched from a peer.
const MaxFileSize = 4 << 30

// manifestMax bounds an artifact's manifest, and maxParts its parts (an
// upgrade file has three or four).
const (
	manifestMax = 1 << 20
	maxParts    = 16
)

// Artifact is one upgrade in the share.
type Artifact struct {
	// Manifest is the digest of the artifact's manifest: what a rollout
	// names and peers fetch.
	Manifest v1.Hash
	Version  string
	// Size is the upgrade file's size.
	Size int64
	// layers are the signed manifest, its signature and the parts (or
	// the file whole, in an artifact an earlier version made).
	layers []v1.Descriptor
}

// Ref is the artifact's reference in the cluster's registry.
func (a Artifact) Ref() string { return layout.UpgradeRepository + "@" + a.Manifest.String() }

// whole reports whether the artifact's one layer is the file whole.
func (a Artifact) whole() bool { return len(a.layers) == 1 }

// layersOf are the layers of a verified upgrade file: its manifest and
// signature (digests to be filled in as they are written) and its parts,
// by the signed manifest's digests.
func layersOf(m upgrade.Manifest, manifest, sig []byte) []v1.Descriptor {
	layers := []v1.Descriptor{
		{MediaType: ManifestMediaType, Size: int64(len(manifest)), Annotations: map[string]string{titleAnnotation: upgrade.ManifestName}},
		{MediaType: SignatureMediaType, Size: int64(len(sig)), Annotations: map[string]string{titleAnnotation: upgrade.SignatureName}},
	}
	for _, p := range m.Parts {
		layers = append(layers, v1.Descriptor{MediaType: PartMediaType, Digest: v1.Hash{Algorithm: "sha256", Hex: p.SHA256}, Size: p.Size,
			Annotations: map[string]string{titleAnnotation: p.Name}})
	}
	return layers
}

// fileSize is the size of the upgrade file of the layers: its members,
// each a header block and its data padded to whole blocks, and the
// archive's two end blocks (the package upgrade's format).
func fileSize(layers []v1.Descriptor) int64 {
	if len(layers) == 1 {
		return layers[0].Size
	}
	const block = 512
	n := int64(2 * block)
	for _, l := range layers {
		n += block + (l.Size+block-1)/block*block
	}
	return n
}

// manifestJSON is the artifact's manifest.
type manifestJSON struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     types.MediaType   `json:"mediaType"`
	ArtifactType  string            `json:"artifactType"`
	Config        v1.Descriptor     `json:"config"`
	Layers        []v1.Descriptor   `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

func manifestFor(empty v1.Hash, layers []v1.Descriptor, version string) ([]byte, error) {
	m := manifestJSON{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
		Config:      v1.Descriptor{MediaType: emptyMediaType, Digest: empty, Size: int64(len(emptyJSON)), Data: []byte(emptyJSON)},
		Layers:      layers,
		Annotations: map[string]string{"org.opencontainers.image.version": version}}
	return json.Marshal(m)
}

// parseManifest reads an artifact's manifest: one of ours, or refused. It
// returns the artifact but for its manifest's digest.
func parseManifest(raw []byte) (Artifact, error) {
	if len(raw) > manifestMax {
		return Artifact{}, fmt.Errorf("not an upgrade artifact manifest: %d bytes, more than %d", len(raw), manifestMax)
	}
	var m manifestJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return Artifact{}, fmt.Errorf("not an upgrade artifact manifest: %w", err)
	}
	if m.ArtifactType != ArtifactType {
		return Artifact{}, fmt.Errorf("not an upgrade artifact manifest: artifactType %q", m.ArtifactType)
	}
	if err := checkLayers(m.Layers); err != nil {
		return Artifact{}, fmt.Errorf("upgrade artifact: %w", err)
	}
	a := Artifact{Version: m.Annotations["org.opencontainers.image.version"], layers: m.Layers}
	if a.Size = fileSize(a.layers); a.Size > MaxFileSize {
		return Artifact{}, fmt.Errorf("upgrade artifact: its file is %d bytes, outside 1..%d", a.Size, int64(MaxFileSize))
	}
	return a, nil
}

// checkLayers refuses layers that are not an upgrade file's: the file
// whole (FileMediaType), or its manifest, its signature and one or more
// parts, each of a size its kind allows and each by a sha256 digest.
func checkLayers(layers []v1.Descriptor) error {
	if len(layers) == 1 && layers[0].MediaType == FileMediaType {
		if l := layers[0]; l.Size <= 0 || l.Size > MaxFileSize || l.Digest.Algorithm != "sha256" {
			return fmt.Errorf("its file is %d bytes by %q, outside 1..%d or not by sha256", l.Size, l.Digest.Algorithm, int64(MaxFileSize))
		}
		return nil
	}
	if len(layers) < 3 || len(layers) > 2+maxParts {
		return fmt.Errorf("%d layers, not a manifest, its signature and 1 to %d parts", len(layers), maxParts)
	}
	for i, l := range layers {
		want, most := PartMediaType, int64(MaxFileSize)
		switch i {
		case 0:
			want, most = ManifestMediaType, upgrade.MaxManifestSize
		case 1:
			want, most = SignatureMediaType, signature.MaxFileSize
		}
		switch {
		case l.MediaType != want:
			return fmt.Errorf("layer %d is %q, not %s", i, l.MediaType, want)
		case l.Size <= 0 || l.Size > most:
			return fmt.Errorf("layer %d (%s) is %d bytes, outside 1..%d", i, l.Annotations[titleAnnotation], l.Size, most)
		case l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != 64:
			return fmt.Errorf("layer %d (%s) is named by %q, not a sha256 digest", i, l.Annotations[titleAnnotation], l.Digest)
		case l.Annotations[titleAnnotation] == "":
			return fmt.Errorf("layer %d has no title", i)
		}
	}
	return nil
}
