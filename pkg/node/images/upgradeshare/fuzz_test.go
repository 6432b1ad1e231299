package upgradeshare

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FuzzParseManifest feeds the artifact manifest reader what a peer could
// send: it reads an upgrade artifact whose file is within the cap, or
// refuses; what it reads is the file whole, or a manifest, a signature
// and parts, each by a sha256 digest.
func FuzzParseManifest(f *testing.F) {
	empty, _, _ := v1.SHA256(strings.NewReader(emptyJSON))
	file, _, _ := v1.SHA256(strings.NewReader("upgrade"))
	whole, _ := manifestFor(empty, []v1.Descriptor{{MediaType: FileMediaType, Digest: file, Size: 7}}, "0.2.0")
	f.Add(whole)
	parts, _ := manifestFor(empty, []v1.Descriptor{
		{MediaType: ManifestMediaType, Digest: file, Size: 7, Annotations: map[string]string{titleAnnotation: "manifest.json"}},
		{MediaType: SignatureMediaType, Digest: file, Size: 7, Annotations: map[string]string{titleAnnotation: "manifest.json.sig"}},
		{MediaType: PartMediaType, Digest: file, Size: 7, Annotations: map[string]string{titleAnnotation: "rootfs.squashfs"}},
	}, "0.2.0")
	f.Add(parts)
	f.Add([]byte(`{"schemaVersion":2,"artifactType":"` + ArtifactType + `","layers":[{"mediaType":"` + string(FileMediaType) + `","size":-1}]}`))
	f.Add([]byte(`{"layers":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := parseManifest(raw)
		if err != nil {
			return
		}
		if a.Size <= 0 || a.Size > MaxFileSize {
			t.Fatalf("accepted a file of %d bytes", a.Size)
		}
		for i, l := range a.layers {
			if l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != 64 || l.Size <= 0 {
				t.Fatalf("accepted layer %d: %+v", i, l)
			}
		}
		if !a.whole() && (len(a.layers) < 3 || a.layers[0].MediaType != ManifestMediaType) {
			t.Fatalf("accepted layers %+v", a.layers)
		}
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			t.Fatalf("accepted what is not a JSON object: %q", raw)
		}
	})
}
