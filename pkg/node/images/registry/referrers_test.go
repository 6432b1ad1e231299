package registry

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Artifact types as cosign and notation write them in their OCI 1.1 form,
// and an SBOM's.
const (
	cosignSigType   = "application/vnd.dev.cosign.artifact.sig.v1+json"
	notationSigType = "application/vnd.cncf.notary.signature"
	spdxType        = "application/spdx+json"
)

// refArtifact is a referrer to write into a layout: an image manifest with
// artifactType (or, with configType, without one and with a config of that
// media type, which the referrers API then reports as its artifactType),
// one layer holding payload, and annotations.
type refArtifact struct {
	artifactType string
	configType   string
	subject      v1.Descriptor
	payload      string
	annotations  map[string]string
}

// writtenArtifact is a referrer written into a layout.
type writtenArtifact struct {
	listed v1.Descriptor // as the referrers API lists it
	layer  v1.Descriptor // its payload
}

func writeBlobBytes(t testing.TB, p layout.Path, b []byte) v1.Hash {
	t.Helper()
	d := sha256Of(b)
	require.NoError(t, p.WriteBlob(d, io.NopCloser(bytes.NewReader(b))))
	return d
}

// writeRefArtifact writes a into the layout at p and records it in
// index.json by digest under repo, as imagebuild writes a bundle's
// referrers.
func writeRefArtifact(t testing.TB, p layout.Path, repo string, a refArtifact) writtenArtifact {
	t.Helper()
	configContent := []byte("{}")
	config := v1.Descriptor{MediaType: types.OCIEmptyJSON}
	listedType := a.artifactType
	if a.configType != "" {
		configContent = []byte(`{"kind":"` + a.configType + `"}`)
		config.MediaType = types.MediaType(a.configType)
		listedType = a.configType
	}
	config.Digest, config.Size = writeBlobBytes(t, p, configContent), int64(len(configContent))
	layer := v1.Descriptor{MediaType: "application/vnd.dev.cosign.simplesigning.v1+json", Size: int64(len(a.payload))}
	layer.Digest = writeBlobBytes(t, p, []byte(a.payload))
	subject := a.subject
	raw, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  a.artifactType,
		Config:        config,
		Layers:        []v1.Descriptor{layer},
		Subject:       &subject,
		Annotations:   a.annotations,
	})
	require.NoError(t, err)
	desc := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(raw)), Digest: writeBlobBytes(t, p, raw)}
	entry := desc
	entry.Annotations = map[string]string{annotationRepository: repo}
	require.NoError(t, p.AppendDescriptor(entry))
	listed := desc
	listed.ArtifactType, listed.Annotations = listedType, a.annotations
	return writtenArtifact{listed: listed, layer: layer}
}

// writeRefIndexArtifact writes an index artifact listing children, whose
// subject is subject, and records it under repo like writeRefArtifact.
func writeRefIndexArtifact(t testing.TB, p layout.Path, repo, artifactType string, subject v1.Descriptor, children []v1.Descriptor, annotations map[string]string) v1.Descriptor {
	t.Helper()
	raw, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		ArtifactType:  artifactType,
		Manifests:     children,
		Subject:       &subject,
		Annotations:   annotations,
	})
	require.NoError(t, err)
	desc := v1.Descriptor{MediaType: types.OCIImageIndex, Size: int64(len(raw)), Digest: writeBlobBytes(t, p, raw)}
	entry := desc
	entry.Annotations = map[string]string{annotationRepository: repo}
	require.NoError(t, p.AppendDescriptor(entry))
	listed := desc
	listed.ArtifactType, listed.Annotations = artifactType, annotations
	return listed
}

// manifestDescriptor describes an image's or index's manifest, as a
// subject names it.
func manifestDescriptor(t testing.TB, m interface {
	MediaType() (types.MediaType, error)
	RawManifest() ([]byte, error)
}) v1.Descriptor {
	t.Helper()
	mt, err := m.MediaType()
	require.NoError(t, err)
	raw, err := m.RawManifest()
	require.NoError(t, err)
	return v1.Descriptor{MediaType: mt, Size: int64(len(raw)), Digest: sha256Of(raw)}
}

// listReferrers asks the registry at host for the referrers of repo@d
// with go-containerregistry's client, with the tag schema fallback off so
// that only the referrers API can answer.
func listReferrers(t testing.TB, host, repo string, d v1.Hash, artifactType string) []v1.Descriptor {
	t.Helper()
	ref, err := name.NewDigest(host+"/"+repo+"@"+d.String(), name.Insecure)
	require.NoError(t, err)
	opts := []remote.Option{remote.WithContext(context.Background()), remote.WithReferrersTagFallback(false)}
	if artifactType != "" {
		opts = append(opts, remote.WithFilter("artifactType", artifactType))
	}
	idx, err := remote.Referrers(ref, opts...)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	return im.Manifests
}

// fetchArtifact fetches a referrer and its payload from the registry at
// host by digest, and checks both against their digests.
func fetchArtifact(t testing.TB, host, repo string, a writtenArtifact, payload string) {
	t.Helper()
	ref, err := name.NewDigest(host+"/"+repo+"@"+a.listed.Digest.String(), name.Insecure)
	require.NoError(t, err)
	got, err := remote.Get(ref, remote.WithContext(context.Background()))
	require.NoError(t, err)
	assert.Equal(t, a.listed.Digest, sha256Of(got.Manifest), "the artifact's manifest matches its digest")
	assert.Equal(t, a.listed.MediaType, got.MediaType)
	m, err := v1.ParseManifest(bytes.NewReader(got.Manifest))
	require.NoError(t, err)
	require.Len(t, m.Layers, 1)
	assert.Equal(t, a.layer, m.Layers[0])

	layerRef, err := name.NewDigest(host+"/"+repo+"@"+a.layer.Digest.String(), name.Insecure)
	require.NoError(t, err)
	l, err := remote.Layer(layerRef, remote.WithContext(context.Background()))
	require.NoError(t, err)
	rc, err := l.Compressed()
	require.NoError(t, err)
	defer rc.Close()
	body, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, payload, string(body))
	assert.Equal(t, a.layer.Digest, sha256Of(body), "the payload matches its digest")
}

// signedFixture is the test fixture with referrers in its layout, as
// imagebuild writes a bundle whose layout source carries them.
type signedFixture struct {
	*fixture
	helloSig, helloSBOM, pauseSig, pauseAMD64Sig writtenArtifact
}

func newSignedFixture(t testing.TB) *signedFixture {
	t.Helper()
	f := &signedFixture{fixture: newFixture(t)}
	p, err := layout.FromPath(f.dir)
	require.NoError(t, err)
	f.helloSig = writeRefArtifact(t, p, helloRepo, refArtifact{
		artifactType: cosignSigType, subject: manifestDescriptor(t, f.hello), payload: "cosign signature of hello",
		annotations: map[string]string{"dev.cosignproject.cosign/signature": "MEUCIQD…"},
	})
	f.helloSBOM = writeRefArtifact(t, p, helloRepo, refArtifact{
		configType: spdxType, subject: manifestDescriptor(t, f.hello), payload: `{"spdxVersion":"SPDX-2.3"}`,
		annotations: map[string]string{"org.opencontainers.image.created": "2026-01-01T00:00:00Z"},
	})
	f.pauseSig = writeRefArtifact(t, p, pauseRepo, refArtifact{
		artifactType: notationSigType, subject: manifestDescriptor(t, f.pause), payload: "notation JWS of the pause index",
		annotations: map[string]string{"io.cncf.notary.x509chain.thumbprint#S256": `["4f1a…"]`},
	})
	f.pauseAMD64Sig = writeRefArtifact(t, p, pauseRepo, refArtifact{
		artifactType: cosignSigType, subject: manifestDescriptor(t, f.pauseAMD64), payload: "cosign signature of pause/amd64",
	})
	return f
}

// TestReferrersFromTheSlotLayout: the slot's bundle carries signatures
// and an SBOM; go-containerregistry's client lists them through the
// referrers API, filters them, and fetches each by digest.
func TestReferrersFromTheSlotLayout(t *testing.T) {
	f := newSignedFixture(t)
	st, err := OpenLayout(f.dir)
	require.NoError(t, err)
	srv, _, _ := startServer(t, WithStores(st))
	host := strings.TrimPrefix(srv.URL, "http://")

	tests := []struct {
		name         string
		repo         string
		subject      v1.Hash
		artifactType string
		want         []writtenArtifact
	}{
		{name: "an image's signature and SBOM", repo: helloRepo, subject: digestOf(t, f.hello),
			want: []writtenArtifact{f.helloSig, f.helloSBOM}},
		{name: "by its short name", repo: "library/hello", subject: digestOf(t, f.hello),
			want: []writtenArtifact{f.helloSig, f.helloSBOM}},
		{name: "signatures only", repo: helloRepo, subject: digestOf(t, f.hello), artifactType: cosignSigType,
			want: []writtenArtifact{f.helloSig}},
		{name: "the SBOM by its config's media type", repo: helloRepo, subject: digestOf(t, f.hello), artifactType: spdxType,
			want: []writtenArtifact{f.helloSBOM}},
		{name: "a type nothing has", repo: helloRepo, subject: digestOf(t, f.hello), artifactType: notationSigType},
		{name: "an index's notation signature", repo: pauseRepo, subject: digestOf(t, f.pause),
			want: []writtenArtifact{f.pauseSig}},
		{name: "a platform manifest's signature", repo: pauseRepo, subject: digestOf(t, f.pauseAMD64),
			want: []writtenArtifact{f.pauseAMD64Sig}},
		{name: "an image nothing refers to", repo: toolsRepo, subject: digestOf(t, f.tools)},
		{name: "a subject in another repository", repo: toolsRepo, subject: digestOf(t, f.hello)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := make([]v1.Descriptor, 0, len(tt.want))
			for _, a := range tt.want {
				want = append(want, a.listed)
			}
			assert.ElementsMatch(t, want, listReferrers(t, host, tt.repo, tt.subject, tt.artifactType))
			for _, a := range tt.want {
				fetchArtifact(t, host, tt.repo, a, payloadOf(t, f.dir, a))
			}
		})
	}
}

// payloadOf reads an artifact's payload from the layout at dir.
func payloadOf(t testing.TB, dir string, a writtenArtifact) string {
	t.Helper()
	b, err := layout.Path(dir).Bytes(a.layer.Digest)
	require.NoError(t, err)
	return string(b)
}

// TestReferrersFromTheCache: artifacts that came into the writable cache,
// from a side-loaded bundle or copied from another store, are listed and
// served like the slot's; a side-load may also carry signatures for the
// slot's own images.
func TestReferrersFromTheCache(t *testing.T) {
	ctx := context.Background()
	const signedRef = "quay.io/acme/signed:1"
	const signedRepo = "quay.io/acme/signed"

	// A side-load disk's layout: a new image, its signature and SBOM, and
	// a signature of the slot's hello image.
	slot := newFixture(t)
	side := filepath.Join(t.TempDir(), "side")
	p, err := layout.Write(side, empty.Index)
	require.NoError(t, err)
	img := ociImage(t, "amd64", 1, 1000)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(refAnnotations(signedRef))))
	sig := writeRefArtifact(t, p, signedRepo, refArtifact{artifactType: notationSigType, subject: manifestDescriptor(t, img),
		payload: "notation signature", annotations: map[string]string{"io.cncf.notary.x509chain.thumbprint#S256": `["9c…"]`}})
	sbom := writeRefArtifact(t, p, signedRepo, refArtifact{artifactType: spdxType, subject: manifestDescriptor(t, img),
		payload: `{"spdxVersion":"SPDX-2.3"}`})
	helloSig := writeRefArtifact(t, p, helloRepo, refArtifact{artifactType: cosignSigType, subject: manifestDescriptor(t, slot.hello),
		payload: "a site's own signature of hello"})

	tests := []struct {
		name string
		// fill puts the side-load's content into the cache.
		fill func(t *testing.T, c *Cache)
	}{
		{name: "side-loaded bundle", fill: func(t *testing.T, c *Cache) {
			refs, err := c.AddLayout(ctx, side)
			require.NoError(t, err)
			assert.Equal(t, []string{signedRef}, refs)
		}},
		{name: "copied from a store", fill: func(t *testing.T, c *Cache) {
			st, err := OpenLayout(side)
			require.NoError(t, err)
			_, err = c.Add(ctx, st, signedRepo, "1")
			require.NoError(t, err)
			for _, a := range []writtenArtifact{sig, sbom} {
				_, err := c.Add(ctx, st, signedRepo, a.listed.Digest.String())
				require.NoError(t, err)
			}
			_, err = c.Add(ctx, st, helloRepo, helloSig.listed.Digest.String())
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slotStore, err := OpenLayout(slot.dir)
			require.NoError(t, err)
			c, err := OpenCache(t.TempDir(), WithBundle(slotStore))
			require.NoError(t, err)
			tt.fill(t, c)
			srv, _, _ := startServer(t, WithStores(slotStore), WithCache(c))
			host := strings.TrimPrefix(srv.URL, "http://")

			assert.ElementsMatch(t, []v1.Descriptor{sig.listed, sbom.listed}, listReferrers(t, host, signedRepo, digestOf(t, img), ""))
			assert.Equal(t, []v1.Descriptor{sig.listed}, listReferrers(t, host, signedRepo, digestOf(t, img), notationSigType))
			assert.Equal(t, []v1.Descriptor{helloSig.listed}, listReferrers(t, host, helloRepo, digestOf(t, slot.hello), ""),
				"a side-loaded signature of a slot's image")
			fetchArtifact(t, host, signedRepo, sig, "notation signature")
			fetchArtifact(t, host, signedRepo, sbom, `{"spdxVersion":"SPDX-2.3"}`)
			fetchArtifact(t, host, helloRepo, helloSig, "a site's own signature of hello")

			// The cache keeps them: a reopened cache lists them again.
			re, err := OpenCache(c.Dir(), WithBundle(slotStore))
			require.NoError(t, err)
			srv2, _, _ := startServer(t, WithStores(slotStore), WithCache(re))
			host2 := strings.TrimPrefix(srv2.URL, "http://")
			assert.ElementsMatch(t, []v1.Descriptor{sig.listed, sbom.listed}, listReferrers(t, host2, signedRepo, digestOf(t, img), ""))
		})
	}
}

// TestReferrersFromPeers: a node that lists no referrers of an image asks
// its peers, fetches what they list into its cache (each manifest checked
// against its digest) and answers from there, also once the peer is gone.
// A peer's own request is never forwarded.
func TestReferrersFromPeers(t *testing.T) {
	f := newSignedFixture(t)
	a, tlsConfig := peerA(t, f.fixture)
	c := openCache(t)
	b, bs, _ := startServer(t, WithCache(c), WithPeers([]string{a.URL}, tlsConfig))
	host := strings.TrimPrefix(b.URL, "http://")
	hello := digestOf(t, f.hello)

	// A request from a peer: B has nothing and asks no one.
	resp, body := do(t, http.MethodGet, b.URL+"/v2/"+helloRepo+"/referrers/"+hello.String(), http.Header{peerHeader: {"1"}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`, string(body))
	assert.Zero(t, bs.Stats().PeerFetches, "a peer's request was forwarded")

	want := []v1.Descriptor{f.helloSig.listed, f.helloSBOM.listed}
	assert.ElementsMatch(t, want, listReferrers(t, host, helloRepo, hello, ""))
	assert.NotZero(t, bs.Stats().PeerFetches)
	for _, r := range want {
		assert.True(t, c.Has(r.Digest), "referrer %s is not in the cache", r.Digest)
	}
	assert.Equal(t, []v1.Descriptor{f.pauseSig.listed}, listReferrers(t, host, "pause", digestOf(t, f.pause), notationSigType),
		"a filtered request asks the peers with the filter")
	fetchArtifact(t, host, helloRepo, f.helloSig, "cosign signature of hello")

	a.Close()
	assert.ElementsMatch(t, want, listReferrers(t, host, helloRepo, hello, ""), "answered from the cache")
}

// TestReferrersSpec checks the registry against the referrers requirements
// of the OCI Distribution Spec 1.1, with the content the conformance
// suite's content-discovery workflow pushes (its "listing references"
// cases), here carried by the layout: a subject image with five referrers
// (two whose artifactType is their config's media type, two with an
// artifactType and the empty config, an index), one more of a subject the
// registry lacks.
func TestReferrersSpec(t *testing.T) {
	const (
		repo          = "quay.io/conformance/referrers"
		typeA         = "application/vnd.nhl.peanut.butter.bagel"
		typeB         = "application/vnd.nba.strawberry.jam.croissant"
		typeIndex     = "application/vnd.food.stand"
		annotationKey = "org.opencontainers.conformance.test"
	)
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	img := ociImage(t, "amd64", 1, 100)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(refAnnotations(repo+":tagtest0"))))
	subject := manifestDescriptor(t, img)
	missing := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: 7, Digest: sha256Of([]byte("missing"))}
	annotated := func(v string) map[string]string { return map[string]string{annotationKey: v} }
	aConfig := writeRefArtifact(t, p, repo, refArtifact{configType: typeA, subject: subject, payload: "A config", annotations: annotated("test config a")})
	aLayer := writeRefArtifact(t, p, repo, refArtifact{artifactType: typeA, subject: subject, payload: "A layer", annotations: annotated("test layer a")})
	bConfig := writeRefArtifact(t, p, repo, refArtifact{configType: typeB, subject: subject, payload: "B config", annotations: annotated("test config b")})
	bLayer := writeRefArtifact(t, p, repo, refArtifact{artifactType: typeB, subject: subject, payload: "B layer", annotations: annotated("test layer b")})
	index := writeRefIndexArtifact(t, p, repo, typeIndex, subject,
		[]v1.Descriptor{stripDescriptor(aConfig.listed), stripDescriptor(aLayer.listed)}, annotated("test index"))
	cLayer := writeRefArtifact(t, p, repo, refArtifact{artifactType: typeB, subject: missing, payload: "C layer", annotations: annotated("test layer c")})

	st, err := OpenLayout(dir)
	require.NoError(t, err)
	srv, _, _ := startServer(t, WithStores(st))
	base := srv.URL + "/v2/" + repo + "/referrers/"

	tests := []struct {
		name        string
		method      string
		path        string // after /v2/<repo>/referrers/
		wantStatus  int
		wantCode    string // an error's code
		wantFilter  bool
		want        []v1.Descriptor
		wantNoBody  bool
		otherPrefix string // instead of base
	}{
		{name: "a digest nothing refers to: an empty index", path: sha256Of([]byte("dummy")).String(), wantStatus: http.StatusOK},
		{name: "the subject's referrers", path: subject.Digest.String(), wantStatus: http.StatusOK,
			want: []v1.Descriptor{aConfig.listed, aLayer.listed, bConfig.listed, bLayer.listed, index}},
		{name: "filtered by artifactType", path: subject.Digest.String() + "?artifactType=" + typeA, wantStatus: http.StatusOK,
			wantFilter: true, want: []v1.Descriptor{aConfig.listed, aLayer.listed}},
		{name: "filtered to the index's type", path: subject.Digest.String() + "?artifactType=" + typeIndex, wantStatus: http.StatusOK,
			wantFilter: true, want: []v1.Descriptor{index}},
		{name: "filtered to a type nothing has", path: subject.Digest.String() + "?artifactType=application/x-none", wantStatus: http.StatusOK,
			wantFilter: true},
		{name: "a subject the registry lacks", path: missing.Digest.String(), wantStatus: http.StatusOK,
			want: []v1.Descriptor{cLayer.listed}},
		{name: "HEAD", method: http.MethodHead, path: subject.Digest.String(), wantStatus: http.StatusOK, wantNoBody: true},
		{name: "an invalid digest", path: "sha256:xyz", wantStatus: http.StatusBadRequest, wantCode: codeDigestInvalid},
		{name: "an unknown algorithm", path: "md5:d41d8cd98f00b204e9800998ecf8427e", wantStatus: http.StatusBadRequest, wantCode: codeDigestInvalid},
		{name: "an unknown repository: an empty index", otherPrefix: srv.URL + "/v2/quay.io/nobody/here/referrers/",
			path: subject.Digest.String(), wantStatus: http.StatusOK},
		{name: "the suite's setup pushes: refused, read-only", method: http.MethodPut,
			otherPrefix: srv.URL + "/v2/" + repo + "/manifests/", path: aLayer.listed.Digest.String(),
			wantStatus: http.StatusMethodNotAllowed, wantCode: codeUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, prefix := tt.method, tt.otherPrefix
			if method == "" {
				method = http.MethodGet
			}
			if prefix == "" {
				prefix = base
			}
			resp, body := do(t, method, prefix+tt.path, nil)
			if tt.wantCode != "" {
				wantError(t, resp, body, tt.wantStatus, tt.wantCode)
				return
			}
			require.Equal(t, tt.wantStatus, resp.StatusCode, "body %s", body)
			assert.Equal(t, "application/vnd.oci.image.index.v1+json", resp.Header.Get("Content-Type"))
			if tt.wantFilter {
				assert.Equal(t, "artifactType", resp.Header.Get("OCI-Filters-Applied"))
			} else {
				assert.Empty(t, resp.Header.Values("OCI-Filters-Applied"))
			}
			if tt.wantNoBody {
				assert.Empty(t, body)
				assert.NotEqual(t, "0", resp.Header.Get("Content-Length"))
				return
			}
			var idx struct {
				SchemaVersion int             `json:"schemaVersion"`
				MediaType     string          `json:"mediaType"`
				Manifests     []v1.Descriptor `json:"manifests"`
			}
			require.NoError(t, json.Unmarshal(body, &idx))
			assert.Equal(t, 2, idx.SchemaVersion)
			assert.Equal(t, "application/vnd.oci.image.index.v1+json", idx.MediaType)
			assert.Contains(t, string(body), `"manifests":[`, "manifests is a list, never null")
			assert.ElementsMatch(t, tt.want, idx.Manifests)
			for _, m := range idx.Manifests {
				assert.Len(t, m.Annotations, 1, "each referrer carries its annotations")
				assert.NotEmpty(t, m.ArtifactType)
			}
		})
	}
}

// TestReferrersPaging: a long list comes in pages joined by Link headers,
// each page within its bounds, together the whole list once. (Referrers
// with large annotations fill a page by its bytes; TestReferrersPage
// checks the count bound.)
func TestReferrersPaging(t *testing.T) {
	const repo = "quay.io/acme/many"
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	img := ociImage(t, "amd64", 1, 100)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(refAnnotations(repo+":1"))))
	subject := manifestDescriptor(t, img)
	want := map[v1.Hash]bool{}
	for i := range 5 {
		a := writeRefArtifact(t, p, repo, refArtifact{artifactType: cosignSigType, subject: subject, payload: strconv.Itoa(i),
			annotations: map[string]string{"note": strings.Repeat("x", referrersPageBytes/4-100)}})
		want[a.listed.Digest] = true
	}
	st, err := OpenLayout(dir)
	require.NoError(t, err)
	srv, _, _ := startServer(t, WithStores(st))

	got := map[v1.Hash]bool{}
	pages := 0
	next := "/v2/" + repo + "/referrers/" + subject.Digest.String() + "?artifactType=" + url.QueryEscape(cosignSigType)
	for next != "" {
		pages++
		require.LessOrEqual(t, pages, 5, "too many pages")
		resp, body := do(t, http.MethodGet, srv.URL+next, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "artifactType", resp.Header.Get("OCI-Filters-Applied"), "every page applies the filter")
		var idx v1.IndexManifest
		require.NoError(t, json.Unmarshal(body, &idx))
		assert.LessOrEqual(t, len(body), referrersPageBytes+1000)
		for _, m := range idx.Manifests {
			assert.False(t, got[m.Digest], "%s listed twice", m.Digest)
			got[m.Digest] = true
		}
		next = ""
		if link := resp.Header.Get("Link"); link != "" {
			u, rel, ok := strings.Cut(link, ">; ")
			require.True(t, ok, "Link %q", link)
			assert.Equal(t, `rel="next"`, rel)
			next = strings.TrimPrefix(u, "<")
		}
	}
	assert.Greater(t, pages, 1, "one page holds it all")
	assert.Equal(t, want, got)
}

func TestReferrersPage(t *testing.T) {
	desc := func(hex string, annotation int) v1.Descriptor {
		d := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: 1, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(hex, 64)}}
		if annotation > 0 {
			d.Annotations = map[string]string{"a": strings.Repeat("x", annotation)}
		}
		return d
	}
	many := make([]v1.Descriptor, 0, referrersPageMax+1)
	for i := range referrersPageMax + 1 {
		d := desc("0", 0)
		d.Digest.Hex = strings.Repeat("0", 60) + hex.EncodeToString([]byte{byte(i >> 8), byte(i)})
		many = append(many, d)
	}
	big := referrersPageBytes / 2
	tests := []struct {
		name     string
		list     []v1.Descriptor
		last     string
		wantLen  int
		wantMore bool
	}{
		{name: "empty", wantLen: 0},
		{name: "one page", list: []v1.Descriptor{desc("1", 0), desc("2", 0)}, wantLen: 2},
		{name: "after last", list: []v1.Descriptor{desc("1", 0), desc("2", 0), desc("3", 0)}, last: desc("1", 0).Digest.String(), wantLen: 2},
		{name: "after the end", list: []v1.Descriptor{desc("1", 0)}, last: desc("9", 0).Digest.String(), wantLen: 0},
		{name: "at most referrersPageMax", list: many, wantLen: referrersPageMax, wantMore: true},
		{name: "at most referrersPageBytes", list: []v1.Descriptor{desc("1", big), desc("2", big), desc("3", big)}, wantLen: 1, wantMore: true},
		{name: "one over the bytes, alone", list: []v1.Descriptor{desc("1", 2*referrersPageBytes), desc("2", 0)}, wantLen: 1, wantMore: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, more := referrersPage(tt.list, tt.last)
			assert.NotNil(t, page)
			assert.Len(t, page, tt.wantLen)
			assert.Equal(t, tt.wantMore, more)
		})
	}
}

func TestParseReferrer(t *testing.T) {
	subject := sha256Of([]byte("subject"))
	tests := []struct {
		name    string
		raw     string
		want    referrerManifest
		wantErr string
	}{
		{name: "artifactType", raw: `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"t","config":{"mediaType":"application/vnd.oci.empty.v1+json"},"subject":{"digest":"` + subject.String() + `"},"annotations":{"k":"v"}}`,
			want: referrerManifest{mediaType: types.OCIManifestSchema1, artifactType: "t", subject: subject, annotations: map[string]string{"k": "v"}}},
		{name: "the config's media type", raw: `{"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"c"},"subject":{"digest":"` + subject.String() + `"}}`,
			want: referrerManifest{mediaType: types.OCIManifestSchema1, artifactType: "c", subject: subject}},
		{name: "an index without artifactType has none", raw: `{"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[],"subject":{"digest":"` + subject.String() + `"}}`,
			want: referrerManifest{mediaType: types.OCIImageIndex, subject: subject}},
		{name: "no media type: an index by its manifests", raw: `{"manifests":[]}`, want: referrerManifest{mediaType: types.OCIImageIndex}},
		{name: "no subject", raw: `{"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"c"}}`,
			want: referrerManifest{mediaType: types.OCIManifestSchema1, artifactType: "c"}},
		{name: "a bad subject", raw: `{"mediaType":"application/vnd.oci.image.manifest.v1+json","subject":{"digest":"sha256:zz"}}`, wantErr: "subject"},
		{name: "no manifest", raw: `{"mediaType":"application/octet-stream"}`, wantErr: "not a manifest"},
		{name: "not JSON", raw: `{`, wantErr: "parse manifest"},
		{name: "annotations not strings", raw: `{"manifests":[],"annotations":{"k":1}}`, wantErr: "parse manifest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseReferrer([]byte(tt.raw))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParsePeerReferrers(t *testing.T) {
	d := func(s string) string { return sha256Of([]byte(s)).String() }
	tests := []struct {
		name    string
		raw     string
		want    []string
		wantErr bool
	}{
		{name: "kept", raw: `{"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d("a") + `","size":10}]}`,
			want: []string{d("a")}},
		{name: "not a manifest, no size, too large, a bad digest, twice",
			raw: `{"manifests":[` +
				`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"` + d("a") + `","size":10},` +
				`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d("b") + `","size":0},` +
				`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d("c") + `","size":99999999999},` +
				`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:nope","size":10},` +
				`{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + d("e") + `","size":10},` +
				`{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + d("e") + `","size":10}]}`,
			want: []string{d("e")}},
		{name: "empty", raw: `{"manifests":[]}`, want: []string{}},
		{name: "not JSON", raw: `[`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePeerReferrers([]byte(tt.raw))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			digests := []string{}
			for _, g := range got {
				digests = append(digests, g.Digest.String())
			}
			assert.Equal(t, tt.want, digests)
		})
	}
}

func TestSubjectMemoIsBounded(t *testing.T) {
	m := newSubjectMemo(2)
	a, b, c := sha256Of([]byte("a")), sha256Of([]byte("b")), sha256Of([]byte("c"))
	m.put(a, c)
	m.put(b, v1.Hash{})
	m.put(b, v1.Hash{}) // again: nothing is forgotten for it
	got, ok := m.get(a)
	require.True(t, ok)
	assert.Equal(t, c, got)
	m.put(c, a)
	assert.Len(t, m.m, 2, "one was forgotten for the third")
	got, ok = m.get(c)
	require.True(t, ok)
	assert.Equal(t, a, got)
}

// TestReferrersOfACorruptArtifact: a referrer whose manifest does not
// match its digest is not listed (and not served).
func TestReferrersOfACorruptArtifact(t *testing.T) {
	f := newSignedFixture(t)
	corrupt(t, filepath.Join(f.dir, "blobs", "sha256", f.helloSig.listed.Digest.Hex))
	st, err := OpenLayout(f.dir)
	require.NoError(t, err)
	srv, _, logs := startServer(t, WithStores(st))
	host := strings.TrimPrefix(srv.URL, "http://")
	assert.Equal(t, []v1.Descriptor{f.helloSBOM.listed}, listReferrers(t, host, helloRepo, digestOf(t, f.hello), ""))
	assert.Contains(t, logs.String(), "content does not match its digest")
	resp, body := do(t, http.MethodGet, srv.URL+"/v2/"+helloRepo+"/manifests/"+f.helloSig.listed.Digest.String(), nil)
	wantError(t, resp, body, http.StatusNotFound, codeManifestUnknown)
}
