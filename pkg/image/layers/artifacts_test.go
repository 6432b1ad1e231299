package layers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnpackSkipsArtifacts: the referrers a bundle carries (a signature
// with the empty config, an SBOM whose config is its own type) are not
// images: their layers are not tar files and are not unpacked.
func TestUnpackSkipsArtifacts(t *testing.T) {
	l := tarLayer(t, [2]string{"a", "a"})
	dir := bundle(t, l)
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	subject := im.Manifests[0]

	write := func(b []byte) v1.Descriptor {
		d, n, err := v1.SHA256(bytes.NewReader(b))
		require.NoError(t, err)
		require.NoError(t, p.WriteBlob(d, io.NopCloser(bytes.NewReader(b))))
		return v1.Descriptor{Digest: d, Size: n}
	}
	tests := []struct {
		name       string
		configType types.MediaType
		config     string
		subject    *v1.Descriptor
	}{
		{name: "a signature", configType: types.OCIEmptyJSON, config: "{}", subject: &subject},
		{name: "an SBOM without a subject", configType: "application/spdx+json", config: `{"spdxVersion":"SPDX-2.3"}`},
		{name: "an attestation with an image config", configType: types.OCIConfigJSON,
			config: `{"rootfs":{"type":"layers","diff_ids":[]}}`, subject: &subject},
	}
	for _, tt := range tests {
		cfg := write([]byte(tt.config))
		cfg.MediaType = tt.configType
		layer := write([]byte("not a tar: " + tt.name))
		layer.MediaType = "application/vnd.in-toto+json"
		raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cfg,
			Layers: []v1.Descriptor{layer}, Subject: tt.subject})
		require.NoError(t, err)
		d := write(raw)
		d.MediaType = types.OCIManifestSchema1
		require.NoError(t, p.AppendDescriptor(d))
	}

	res, err := Unpack(context.Background(), dir, t.TempDir(), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Images, "only the image")
	assert.Equal(t, 1, res.Unpacked)
}
