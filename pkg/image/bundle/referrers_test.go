package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	layoutcontract "github.com/terrarium-os/terrarium/pkg/contract/layout"
)

const (
	cosignSigType   = "application/vnd.dev.cosign.artifact.sig.v1+json"
	notationSigType = "application/vnd.cncf.notary.signature"
	spdxType        = "application/spdx+json"
)

func writeTestBlob(t *testing.T, p layout.Path, b []byte) v1.Hash {
	t.Helper()
	d, _, err := v1.SHA256(bytes.NewReader(b))
	require.NoError(t, err)
	require.NoError(t, p.WriteBlob(d, io.NopCloser(bytes.NewReader(b))))
	return d
}

// subjectOfTest describes an image's or index's manifest, as a subject
// names it.
func subjectOfTest(t *testing.T, m manifest) v1.Descriptor {
	t.Helper()
	a := artifact{}
	switch m := m.(type) {
	case v1.Image:
		a.image = m
	case v1.ImageIndex:
		a.index = m
	}
	d, err := a.descriptor()
	require.NoError(t, err)
	return d
}

// appendReferrer writes an artifact whose subject is subject into the
// layout at p and lists it in index.json without a name, as oras and
// cosign write referrers into an OCI layout; it returns its digest.
func appendReferrer(t *testing.T, p layout.Path, subject v1.Descriptor, artifactType, payload string) v1.Hash {
	t.Helper()
	config := v1.Descriptor{MediaType: types.OCIEmptyJSON, Size: 2, Digest: writeTestBlob(t, p, []byte("{}"))}
	layer := v1.Descriptor{MediaType: "application/vnd.dev.cosign.simplesigning.v1+json", Size: int64(len(payload)),
		Digest: writeTestBlob(t, p, []byte(payload))}
	raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: artifactType,
		Config: config, Layers: []v1.Descriptor{layer}, Subject: &subject,
		Annotations: map[string]string{"org.opencontainers.image.created": "2026-01-01T00:00:00Z"}})
	require.NoError(t, err)
	d := writeTestBlob(t, p, raw)
	require.NoError(t, p.AppendDescriptor(v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(raw)), Digest: d,
		ArtifactType: artifactType}))
	return d
}

func referrerDigests(t *testing.T, rs []Referrer) []v1.Hash {
	t.Helper()
	out := make([]v1.Hash, 0, len(rs))
	for _, r := range rs {
		d, err := r.artifact().descriptor()
		require.NoError(t, err)
		out = append(out, d.Digest)
	}
	return out
}

// TestLayoutSourceCarriesReferrers: an image from a layout comes with the
// artifacts whose subject is one of its manifests (and theirs in turn),
// not with those of other images, nor with those of an index the bundle
// narrows away.
func TestLayoutSourceCarriesReferrers(t *testing.T) {
	app := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	other := testImage(t, "linux/amd64", testLayer(t, "other", "other"))
	multi := testIndex(t, "linux/amd64", "linux/arm64")
	im, err := multi.IndexManifest()
	require.NoError(t, err)
	amd64 := im.Manifests[0]

	tests := []struct {
		name      string
		ref       string
		platforms string
		// fill writes the layout's referrers and returns those wanted.
		fill func(t *testing.T, p layout.Path) []v1.Hash
	}{
		{name: "an image's, and theirs in turn", ref: "quay.io/x/app:1", fill: func(t *testing.T, p layout.Path) []v1.Hash {
			sig := appendReferrer(t, p, subjectOfTest(t, app), cosignSigType, "sig of app")
			sbom := appendReferrer(t, p, subjectOfTest(t, app), spdxType, `{"spdxVersion":"SPDX-2.3"}`)
			appendReferrer(t, p, subjectOfTest(t, other), cosignSigType, "sig of other")
			sbomSig := appendReferrer(t, p, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: sbom, Size: 1}, notationSigType, "sig of the SBOM")
			return []v1.Hash{sig, sbom, sbomSig}
		}},
		{name: "the sole image, its referrers aside", fill: func(t *testing.T, p layout.Path) []v1.Hash {
			return []v1.Hash{appendReferrer(t, p, subjectOfTest(t, app), cosignSigType, "sig of app")}
		}},
		{name: "none", ref: "quay.io/x/app:1", fill: func(*testing.T, layout.Path) []v1.Hash { return nil }},
		{name: "an index narrowed to a platform: its image's only", ref: "quay.io/x/multi:1", platforms: "[linux/amd64]",
			fill: func(t *testing.T, p layout.Path) []v1.Hash {
				appendReferrer(t, p, subjectOfTest(t, multi), notationSigType, "sig of the index")
				return []v1.Hash{appendReferrer(t, p, amd64, cosignSigType, "sig of amd64")}
			}},
		{name: "an index kept whole: its own and its images'", ref: "quay.io/x/multi:1", platforms: "[linux/amd64, linux/arm64]",
			fill: func(t *testing.T, p layout.Path) []v1.Hash {
				return []v1.Hash{
					appendReferrer(t, p, subjectOfTest(t, multi), notationSigType, "sig of the index"),
					appendReferrer(t, p, amd64, cosignSigType, "sig of amd64"),
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			entries := map[string]any{"quay.io/x/app:1": app}
			switch tt.ref {
			case "":
				entries = map[string]any{"": app}
			case "quay.io/x/multi:1":
				entries = map[string]any{tt.ref: multi}
			default:
				entries["quay.io/x/other:1"] = other
			}
			writeTestLayout(t, filepath.Join(dir, "oci"), entries)
			p, err := layout.FromPath(filepath.Join(dir, "oci"))
			require.NoError(t, err)
			want := tt.fill(t, p)

			src := "      layout: {path: ./oci"
			if tt.ref != "" {
				src += ", ref: " + tt.ref
			}
			platforms := ""
			if tt.platforms != "" {
				platforms = "platforms: " + tt.platforms + "\n"
			}
			b := writeBundle(t, dir, platforms+"images:\n  - name: quay.io/x/app:1\n    source:\n"+src+"}\n")
			r := resolveOne(t, b, WithCacheDir(t.TempDir()))
			assert.ElementsMatch(t, want, referrerDigests(t, r.Referrers))
		})
	}
}

// TestWriteLayoutRecordsReferrers: a referrer goes into the layout with
// its blobs and an index.json entry naming its image's repository (once
// per repository), and into the manifest record.
func TestWriteLayoutRecordsReferrers(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	app := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	writeTestLayout(t, src, map[string]any{"quay.io/x/app:1": app})
	p, err := layout.FromPath(src)
	require.NoError(t, err)
	sig := appendReferrer(t, p, subjectOfTest(t, app), cosignSigType, "sig of app")
	sbom := appendReferrer(t, p, subjectOfTest(t, app), spdxType, "sbom of app")
	a, err := readLayout(src, "quay.io/x/app:1", []v1.Platform{{OS: "linux", Architecture: "amd64"}})
	require.NoError(t, err)
	require.Len(t, a.referrers, 2)
	images := []Resolved{
		{Name: "quay.io/x/app:1", Image: app, Referrers: a.referrerList()},
		{Name: "quay.io/x/app:latest", Image: app, Referrers: a.referrerList()}, // the same repository: recorded once
		{Name: "docker.io/library/app:1", Image: app, Referrers: a.referrerList()},
	}

	dir := filepath.Join(t.TempDir(), "layout")
	m, err := WriteLayout(context.Background(), dir, images)
	require.NoError(t, err)

	out, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := out.ImageIndex()
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	var named []string
	recorded := map[string][]v1.Hash{}
	for _, d := range im.Manifests {
		if n := d.Annotations[RefNameAnnotation]; n != "" {
			named = append(named, n)
			continue
		}
		repo := d.Annotations[layoutcontract.BundleRepositoryAnnotation]
		require.NotEmpty(t, repo, "entry %s has neither a name nor a repository", d.Digest)
		recorded[repo] = append(recorded[repo], d.Digest)
		ref, err := idx.Image(d.Digest)
		require.NoError(t, err, "the referrer is in the layout")
		rm, err := ref.Manifest()
		require.NoError(t, err)
		assert.Equal(t, digestOf(t, app), rm.Subject.Digest)
		_, err = ref.Layers()
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"quay.io/x/app:1", "quay.io/x/app:latest", "docker.io/library/app:1"}, named)
	assert.Equal(t, map[string][]v1.Hash{"quay.io/x/app": {sig, sbom}, "docker.io/library/app": {sig, sbom}}, recorded)

	require.Len(t, m.Images, 3)
	assert.Equal(t, []ReferrerRecord{
		{Digest: sig.String(), MediaType: string(types.OCIManifestSchema1), ArtifactType: cosignSigType},
		{Digest: sbom.String(), MediaType: string(types.OCIManifestSchema1), ArtifactType: spdxType},
	}, m.Images[0].Referrers)
	assert.Equal(t, countBlobs(t, dir), m.Blobs, "the referrers' blobs counted once")
}

// TestStoreKeepsReferrers: the build cache keeps an image's referrers
// with it, and a new put under the key replaces them.
func TestStoreKeepsReferrers(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	app := testImage(t, "linux/amd64", testLayer(t, "app", "app"))
	writeTestLayout(t, src, map[string]any{"quay.io/x/app:1": app})
	p, err := layout.FromPath(src)
	require.NoError(t, err)
	sig := appendReferrer(t, p, subjectOfTest(t, app), cosignSigType, "sig of app")
	a, err := readLayout(src, "quay.io/x/app:1", []v1.Platform{{OS: "linux", Architecture: "amd64"}})
	require.NoError(t, err)

	st, err := openStore(t.TempDir())
	require.NoError(t, err)
	noProgress := func(int64, int64) {}
	stored, err := st.put(context.Background(), "k", a, noProgress)
	require.NoError(t, err)
	assert.Equal(t, []v1.Hash{sig}, referrerDigests(t, stored.referrerList()))
	got, ok, err := st.lookup("k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []v1.Hash{sig}, referrerDigests(t, got.referrerList()))

	_, err = st.put(context.Background(), "k", artifact{image: app}, noProgress)
	require.NoError(t, err)
	got, ok, err = st.lookup("k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Empty(t, got.referrers)
}

func TestSubjectOf(t *testing.T) {
	d := "sha256:" + string(bytes.Repeat([]byte("a"), 64))
	tests := []struct {
		name    string
		raw     string
		want    string
		wantErr string
	}{
		{name: "a subject", raw: `{"subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d + `","size":1}}`, want: d},
		{name: "none", raw: `{"schemaVersion":2}`},
		{name: "no digest", raw: `{"subject":{}}`, wantErr: "no digest"},
		{name: "a bad digest", raw: `{"subject":{"digest":"sha256:zz"}}`, wantErr: "parse manifest"},
		{name: "not JSON", raw: `{`, wantErr: "parse manifest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subjectOf([]byte(tt.raw))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			if tt.want == "" {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tt.want, got.String())
		})
	}
}

func TestRepositoryOf(t *testing.T) {
	tests := map[string]string{
		"docker.io/library/hello:1.0":     "docker.io/library/hello",
		"localhost:5000/x/y:2":            "localhost:5000/x/y",
		"localhost:5000/x/y":              "localhost:5000/x/y",
		"quay.io/x/y:1@sha256:" + hex64(): "quay.io/x/y",
		"registry.k8s.io/pause":           "registry.k8s.io/pause",
	}
	for in, want := range tests {
		assert.Equal(t, want, repositoryOf(in), in)
	}
}

func hex64() string { return string(bytes.Repeat([]byte("0"), 64)) }

// FuzzSubjectOf: subjectOf never panics, and a subject it returns is a
// digest.
func FuzzSubjectOf(f *testing.F) {
	f.Add([]byte(`{"subject":{"digest":"sha256:` + hex64() + `"}}`))
	f.Add([]byte(`{"subject":{"digest":""}}`))
	f.Add([]byte(`{"subject":null,"manifests":[]}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := subjectOf(raw)
		if err != nil || s == nil {
			return
		}
		_, err = v1.NewHash(s.String())
		assert.NoError(t, err)
	})
}
