package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// referrersFuzzSubject is the subject the fuzz seeds' referrers name.
const referrersFuzzSubject = "sha256:9e1e8ae9bde5ea2a6d7a32b68bd4bbbbf0ef5be4b3d8cf7f64ed79f1ae2b0e1a"

// referrersFuzzSeeds are manifests as cosign, notation and the conformance
// suite write them, and some that are not.
func referrersFuzzSeeds() []string {
	subject := `{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":500,"digest":"` + referrersFuzzSubject + `"}`
	return []string{
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.dev.cosign.artifact.sig.v1+json",` +
			`"config":{"mediaType":"application/vnd.oci.empty.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},` +
			`"layers":[{"mediaType":"application/vnd.dev.cosign.simplesigning.v1+json","size":10,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",` +
			`"annotations":{"dev.cosignproject.cosign/signature":"MEUC"}}],"subject":` + subject + `,"annotations":{"org.opencontainers.image.created":"2026-01-01T00:00:00Z"}}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/spdx+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[],"subject":` + subject + `}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","artifactType":"application/vnd.food.stand","manifests":[],"subject":` + subject + `,"annotations":{"k":"v"}}`,
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[]}`,
		`{"subject":{"digest":"sha256:zz"},"manifests":[]}`,
		`{"mediaType":"application/octet-stream","subject":` + subject + `}`,
		`{"Subject":` + subject + `,"MANIFESTS":[],"annotations":{"a":"` + strings.Repeat("x", 64) + `"}}`,
		`[]`,
		``,
	}
}

// FuzzParseReferrer: parseReferrer never panics, and what it accepts is a
// manifest whose subject, if any, is a digest the server can use.
func FuzzParseReferrer(f *testing.F) {
	for _, s := range referrersFuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := parseReferrer(raw)
		if err != nil {
			return
		}
		assert.True(t, isManifestType(m.mediaType), "accepted media type %q", m.mediaType)
		if m.subject != (v1.Hash{}) {
			_, err := parseDigest(m.subject.String())
			assert.NoError(t, err, "accepted subject %q", m.subject)
		}
		if m.mediaType.IsIndex() {
			var idx struct {
				ArtifactType string `json:"artifactType"`
			}
			require.NoError(t, json.Unmarshal(raw, &idx))
			assert.Equal(t, idx.ArtifactType, m.artifactType, "an index's artifactType is its own, or none")
		}
	})
}

// FuzzParsePeerReferrers: what a peer lists is never trusted past the
// bounds: at most peerReferrersMax descriptors, each once, each a manifest
// of a checkable digest and a size the server reads.
func FuzzParsePeerReferrers(f *testing.F) {
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":10,"digest":"` + referrersFuzzSubject + `"}]}`))
	f.Add([]byte(`{"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":-1,"digest":"sha256:00"},{"mediaType":"x","size":1,"digest":"` + referrersFuzzSubject + `"}]}`))
	f.Add([]byte(`{"manifests":null}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		descs, err := parsePeerReferrers(raw)
		if err != nil {
			return
		}
		assert.LessOrEqual(t, len(descs), peerReferrersMax)
		seen := map[v1.Hash]bool{}
		for _, d := range descs {
			assert.False(t, seen[d.Digest], "%s twice", d.Digest)
			seen[d.Digest] = true
			_, err := parseDigest(d.Digest.String())
			assert.NoError(t, err)
			assert.True(t, isManifestType(d.MediaType))
			assert.True(t, d.Size > 0 && d.Size <= maxManifestSize, "size %d", d.Size)
		}
	})
}

// memStore is a Store and ManifestLister of manifests in memory, all
// under one repository.
type memStore struct {
	repo      string
	manifests map[v1.Hash][]byte
}

type memBody struct{ *bytes.Reader }

func (memBody) Close() error { return nil }

func (m *memStore) Resolve(_ context.Context, repo, ref string) (v1.Descriptor, error) {
	h, err := parseDigest(ref)
	if err != nil || repo != m.repo {
		return v1.Descriptor{}, fmt.Errorf("%s@%s: %w", repo, ref, ErrNotFound)
	}
	raw, ok := m.manifests[h]
	if !ok {
		return v1.Descriptor{}, fmt.Errorf("%s@%s: %w", repo, ref, ErrNotFound)
	}
	return v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: h, Size: int64(len(raw))}, nil
}

func (m *memStore) Open(_ context.Context, d v1.Hash) (*Content, error) {
	raw, ok := m.manifests[d]
	if !ok {
		return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	return &Content{Body: memBody{bytes.NewReader(raw)}, Size: int64(len(raw))}, nil
}

func (m *memStore) Manifests(_ context.Context, repo string) ([]v1.Descriptor, error) {
	if repo != m.repo {
		return nil, fmt.Errorf("%s: %w", repo, ErrUnknownRepository)
	}
	var out []v1.Descriptor
	for h, raw := range m.manifests {
		out = append(out, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: h, Size: int64(len(raw))})
	}
	return out, nil
}

// FuzzServeReferrers serves a store of fuzzed manifests: the referrers API
// always answers a valid digest with 200 and an OCI index within its
// bounds, listing exactly the stored manifests whose subject it is, each
// as its content says.
func FuzzServeReferrers(f *testing.F) {
	seeds := referrersFuzzSeeds()
	for i := range seeds {
		f.Add([]byte(seeds[i]), []byte(seeds[(i+1)%len(seeds)]), "")
	}
	f.Add([]byte(seeds[0]), []byte(seeds[1]), "application/spdx+json")
	f.Fuzz(func(t *testing.T, a, b []byte, artifactType string) {
		const repo = "quay.io/fuzz/app"
		st := &memStore{repo: repo, manifests: map[v1.Hash][]byte{}}
		for _, raw := range [][]byte{a, b} {
			st.manifests[sha256Of(raw)] = raw
		}
		s, err := New(WithStores(st), WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		req := httptest.NewRequest(http.MethodGet, "/v2/"+repo+"/referrers/"+referrersFuzzSubject, nil)
		q := req.URL.Query()
		if artifactType != "" {
			q.Set("artifactType", artifactType)
		}
		req.URL.RawQuery = q.Encode()
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)

		require.Equal(t, http.StatusOK, w.Code, "body %s", w.Body)
		assert.Equal(t, string(types.OCIImageIndex), w.Header().Get("Content-Type"))
		var idx v1.IndexManifest
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &idx))
		require.NotNil(t, idx.Manifests)
		want := 0
		for h, raw := range st.manifests {
			m, err := parseReferrer(raw)
			if err == nil && m.subject.String() == referrersFuzzSubject && (artifactType == "" || m.artifactType == artifactType) {
				want++
				assert.Contains(t, idx.Manifests, roundTrip(t, v1.Descriptor{MediaType: m.mediaType, Digest: h, Size: int64(len(raw)),
					ArtifactType: m.artifactType, Annotations: m.annotations}))
			}
		}
		assert.Len(t, idx.Manifests, want)
		assert.LessOrEqual(t, w.Body.Len(), referrersPageBytes+len(a)+len(b)+1024)
	})
}

// roundTrip is d as a client reads it from JSON (an empty map omitted,
// invalid UTF-8 replaced).
func roundTrip(t testing.TB, d v1.Descriptor) v1.Descriptor {
	t.Helper()
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	var out v1.Descriptor
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}
