package upgradeshare

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FuzzParseManifest feeds the artifact manifest reader what a peer could
// send: it reads an upgrade artifact whose file is within the cap, or
// refuses; what it reads names one file of our media type.
func FuzzParseManifest(f *testing.F) {
	empty, _, _ := v1.SHA256(strings.NewReader(emptyJSON))
	file, _, _ := v1.SHA256(strings.NewReader("upgrade"))
	good, _ := manifestFor(empty, file, 7, "0.2.0")
	f.Add(good)
	f.Add([]byte(`{"schemaVersion":2,"artifactType":"` + ArtifactType + `","layers":[{"mediaType":"` + string(FileMediaType) + `","size":-1}]}`))
	f.Add([]byte(`{"layers":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, _, err := parseManifest(raw)
		if err != nil {
			return
		}
		if l.MediaType != FileMediaType || l.Size <= 0 || l.Size > MaxFileSize {
			t.Fatalf("accepted a layer %+v", l)
		}
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			t.Fatalf("accepted what is not a JSON object: %q", raw)
		}
	})
}
