package bundledisk

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/bundle"
	"github.com/terrarium-os/terrarium/pkg/node/images/registry"
)

const cosignSigType = "application/vnd.dev.cosign.artifact.sig.v1+json"

func writeBlob(t *testing.T, p layout.Path, b []byte) v1.Descriptor {
	t.Helper()
	d, n, err := v1.SHA256(bytes.NewReader(b))
	require.NoError(t, err)
	require.NoError(t, p.WriteBlob(d, io.NopCloser(bytes.NewReader(b))))
	return v1.Descriptor{Digest: d, Size: n}
}

// TestDiskCarriesReferrers: a bundle image from an OCI layout that holds
// a cosign signature of it (in its OCI 1.1 form) goes onto the side-load
// disk with the signature; a node adds the disk to its cache and its
// registry lists the signature through the referrers API and serves it.
func TestDiskCarriesReferrers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// The build host's layout: the image, and its signature as cosign
	// writes it into a layout (an index.json entry without a name).
	src := filepath.Join(dir, "oci")
	p, err := layout.Write(src, empty.Index)
	require.NoError(t, err)
	l, err := random.Layer(1000, types.OCILayer)
	require.NoError(t, err)
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), l)
	require.NoError(t, err)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}})
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{bundle.RefNameAnnotation: "quay.io/acme/signed:1"})))
	imgDigest, err := img.Digest()
	require.NoError(t, err)
	imgRaw, err := img.RawManifest()
	require.NoError(t, err)

	config := writeBlob(t, p, []byte("{}"))
	config.MediaType = types.OCIEmptyJSON
	payload := []byte(`{"critical":{"image":{"docker-manifest-digest":"` + imgDigest.String() + `"}}}`)
	sigLayer := writeBlob(t, p, payload)
	sigLayer.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	sigLayer.Annotations = map[string]string{"dev.cosignproject.cosign/signature": "MEUCIQ…"}
	raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: cosignSigType,
		Config: config, Layers: []v1.Descriptor{sigLayer},
		Subject: &v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: imgDigest, Size: int64(len(imgRaw))}})
	require.NoError(t, err)
	sig := writeBlob(t, p, raw)
	sig.MediaType = types.OCIManifestSchema1
	require.NoError(t, p.AppendDescriptor(sig))

	bundleFile := filepath.Join(dir, "bundle.yaml")
	require.NoError(t, os.WriteFile(bundleFile, []byte("apiVersion: terrarium.dev/v1alpha1\nkind: Bundle\nname: signed\nversion: 0.1.0\n"+
		"images:\n  - name: quay.io/acme/signed:1\n    source:\n      layout: {path: ./oci, ref: quay.io/acme/signed:1}\n"), 0o644))
	disk := filepath.Join(dir, "bundle.img")
	m, err := Write(ctx, bundleFile, disk, Signing{}, bundle.WithCacheDir(filepath.Join(dir, "cache")))
	require.NoError(t, err)
	require.Len(t, m.Images, 1)
	require.Len(t, m.Images[0].Referrers, 1)
	assert.Equal(t, bundle.ReferrerRecord{Digest: sig.Digest.String(), MediaType: string(types.OCIManifestSchema1), ArtifactType: cosignSigType},
		m.Images[0].Referrers[0])

	extracted := extractFAT(t, disk, dir)

	cache, err := registry.OpenCache(t.TempDir())
	require.NoError(t, err)
	refs, err := cache.AddLayout(ctx, extracted)
	require.NoError(t, err)
	assert.Equal(t, []string{"quay.io/acme/signed:1"}, refs)
	srv, err := registry.New(registry.WithCache(cache))
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	host := strings.TrimPrefix(hs.URL, "http://")

	subject, err := name.NewDigest(host+"/quay.io/acme/signed@"+imgDigest.String(), name.Insecure)
	require.NoError(t, err)
	idx, err := remote.Referrers(subject, remote.WithReferrersTagFallback(false), remote.WithFilter("artifactType", cosignSigType))
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	assert.Equal(t, sig.Digest, im.Manifests[0].Digest)
	assert.Equal(t, cosignSigType, im.Manifests[0].ArtifactType)

	got, err := remote.Get(subject.Context().Digest(sig.Digest.String()))
	require.NoError(t, err)
	gotDigest, _, err := v1.SHA256(bytes.NewReader(got.Manifest))
	require.NoError(t, err)
	assert.Equal(t, sig.Digest, gotDigest, "the signature matches its digest")
	layer, err := remote.Layer(subject.Context().Digest(sigLayer.Digest.String()))
	require.NoError(t, err)
	rc, err := layer.Compressed()
	require.NoError(t, err)
	defer rc.Close()
	body, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, payload, body)
}
