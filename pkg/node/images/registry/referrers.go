package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Bounds on the referrers API. Its answer is built from manifests, which
// may come from outside (side-load disks, peers): it is paged, and what
// one request fetches from peers for it is capped.
const (
	// referrersPageMax is the most descriptors one response lists; the
	// rest follow on the pages its Link header leads to.
	referrersPageMax = 256
	// referrersPageBytes bounds the encoded descriptors of one response.
	// A single descriptor over it is still listed, alone on its page: the
	// size of its manifest bounds it.
	referrersPageBytes = 1 << 20
	// peerReferrersMax is the most referrers one request fetches from
	// peers.
	peerReferrersMax = 64
	// subjectMemoMax is the most manifests whose subject a server
	// remembers.
	subjectMemoMax = 1 << 16
)

// filterArtifactType is the filter the referrers API defines: its query
// parameter, and the value of the OCI-Filters-Applied header that says a
// response applied it.
const filterArtifactType = "artifactType"

// serveReferrers answers GET /v2/<name>/referrers/<digest> (OCI
// Distribution Spec 1.1): an OCI image index of the descriptors of the
// manifests under the repository whose subject is digest, each with its
// artifactType and annotations; ?artifactType= keeps those of one type
// (OCI-Filters-Applied: artifactType). A valid digest that nothing refers
// to, or that no store holds, has an empty index, never a 404.
//
// The local stores are read first. When they list none, the peers are
// asked, and the manifests they list are fetched into the cache as on any
// miss (verified against their digests, recorded under the repository):
// the answer is always read from verified content, never taken from a
// peer's word.
func (s *Server) serveReferrers(w http.ResponseWriter, r *http.Request, name, ns, digest string) {
	ctx := r.Context()
	subject, err := parseDigest(digest)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeDigestInvalid, "invalid digest", err.Error())
		return
	}
	q := r.URL.Query()
	artifactType := q.Get(filterArtifactType)
	repo := s.fullRepo(ctx, name, ns)
	list := s.localReferrers(ctx, repo, subject, artifactType)
	if len(list) == 0 && s.peers != nil && !fromPeer(r) {
		if err := s.pullReferrers(ctx, name, ns, repo, subject, artifactType); err != nil {
			s.log.Debug("registry: referrers not available from peers", "repository", repo, "subject", subject, "err", err)
		}
		list = s.localReferrers(ctx, repo, subject, artifactType)
	}
	page, more := referrersPage(list, q.Get("last"))
	body, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: page})
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeUnknown, "encode referrers", err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(types.OCIImageIndex))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if artifactType != "" {
		h.Set("OCI-Filters-Applied", filterArtifactType)
	}
	if more {
		h.Set("Link", nextReferrersLink(r, page[len(page)-1].Digest))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// referrersPage is the page of list (sorted by digest) after last, and
// whether more follow.
func referrersPage(list []v1.Descriptor, last string) ([]v1.Descriptor, bool) {
	if last != "" {
		list = list[sort.Search(len(list), func(i int) bool { return list[i].Digest.String() > last }):]
	}
	page := make([]v1.Descriptor, 0, min(len(list), referrersPageMax))
	size := 0
	for _, d := range list {
		if len(page) == referrersPageMax {
			break
		}
		n := descriptorSize(d)
		if len(page) > 0 && size+n > referrersPageBytes {
			break
		}
		page = append(page, d)
		size += n
	}
	return page, len(page) < len(list)
}

// descriptorSize is the length of d encoded.
func descriptorSize(d v1.Descriptor) int {
	b, err := json.Marshal(d)
	if err != nil {
		return referrersPageBytes
	}
	return len(b)
}

// nextReferrersLink is the Link header leading to the page after last.
func nextReferrersLink(r *http.Request, last v1.Hash) string {
	q := r.URL.Query()
	q.Set("last", last.String())
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	return "<" + u.String() + `>; rel="next"`
}

// localReferrers lists, by digest, the referrers of subject that the local
// stores hold under repo, of artifactType unless it is empty.
func (s *Server) localReferrers(ctx context.Context, repo string, subject v1.Hash, artifactType string) []v1.Descriptor {
	seen := map[v1.Hash]bool{}
	out := []v1.Descriptor{}
	for _, src := range s.sources {
		ml, ok := src.store.(ManifestLister)
		if !ok {
			continue
		}
		descs, err := ml.Manifests(ctx, repo)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				s.log.Warn("registry: list manifests", "store", src.key, "repository", repo, "err", err)
			}
			continue
		}
		for _, desc := range descs {
			if seen[desc.Digest] {
				continue
			}
			seen[desc.Digest] = true
			ref, ok := s.referrer(ctx, desc, subject)
			if ok && (artifactType == "" || ref.ArtifactType == artifactType) {
				out = append(out, ref)
			}
		}
	}
	slices.SortFunc(out, func(a, b v1.Descriptor) int { return strings.Compare(a.Digest.String(), b.Digest.String()) })
	return out
}

// referrer reads the manifest desc and returns its descriptor for the
// referrers API if its subject is subject. Which subject a manifest has
// is remembered: a digest's content never changes.
func (s *Server) referrer(ctx context.Context, desc v1.Descriptor, subject v1.Hash) (v1.Descriptor, bool) {
	if got, known := s.subjects.get(desc.Digest); known && got != subject {
		return v1.Descriptor{}, false
	}
	raw, err := s.readManifest(ctx, desc.Digest)
	if err != nil {
		s.log.Debug("registry: manifest not read for the referrers API", "digest", desc.Digest, "err", err)
		return v1.Descriptor{}, false
	}
	m, err := parseReferrer(raw)
	if err != nil {
		s.log.Debug("registry: manifest not listed as a referrer", "digest", desc.Digest, "err", err)
		s.subjects.put(desc.Digest, v1.Hash{})
		return v1.Descriptor{}, false
	}
	s.subjects.put(desc.Digest, m.subject)
	if m.subject != subject {
		return v1.Descriptor{}, false
	}
	return v1.Descriptor{
		MediaType:    m.mediaType,
		Digest:       desc.Digest,
		Size:         int64(len(raw)),
		ArtifactType: m.artifactType,
		Annotations:  m.annotations,
	}, true
}

// readManifest reads the manifest d from the first local store that has it
// intact, checking the very bytes it returns against d.
func (s *Server) readManifest(ctx context.Context, d v1.Hash) ([]byte, error) {
	c, err := s.openVerified(ctx, d)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if c.Size > maxManifestSize {
		return nil, fmt.Errorf("manifest %s: %d bytes, more than %d", d, c.Size, maxManifestSize)
	}
	raw, err := io.ReadAll(io.LimitReader(c.Body, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", d, err)
	}
	h, err := v1.Hasher(d.Algorithm)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d, err)
	}
	h.Write(raw)
	if err := compareSum(h, d); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d, err)
	}
	return raw, nil
}

// referrerManifest is what the referrers API lists of a manifest.
type referrerManifest struct {
	mediaType    types.MediaType
	artifactType string
	subject      v1.Hash // the zero Hash: the manifest has none
	annotations  map[string]string
}

// parseReferrer reads what the referrers API lists of a manifest (an image
// manifest or an index): its media type, its subject, its artifactType
// (for an image manifest without one, its config's media type, as the
// spec says) and its annotations. Content that is no manifest, or whose
// subject is not a valid digest, is an error.
func parseReferrer(raw []byte) (referrerManifest, error) {
	var m struct {
		MediaType    types.MediaType `json:"mediaType"`
		ArtifactType string          `json:"artifactType"`
		Config       *struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
		Manifests json.RawMessage `json:"manifests"`
		Subject   *struct {
			Digest string `json:"digest"`
		} `json:"subject"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return referrerManifest{}, fmt.Errorf("parse manifest: %w", err)
	}
	out := referrerManifest{mediaType: m.MediaType, artifactType: m.ArtifactType, annotations: m.Annotations}
	switch {
	case out.mediaType != "":
	case m.Manifests != nil:
		out.mediaType = types.OCIImageIndex
	case m.Config != nil:
		out.mediaType = types.OCIManifestSchema1
	}
	if !isManifestType(out.mediaType) {
		return referrerManifest{}, fmt.Errorf("media type %q is not a manifest's", out.mediaType)
	}
	if m.Subject != nil {
		h, err := parseDigest(m.Subject.Digest)
		if err != nil {
			return referrerManifest{}, fmt.Errorf("subject: %w", err)
		}
		out.subject = h
	}
	if out.artifactType == "" && out.mediaType.IsImage() && m.Config != nil {
		out.artifactType = m.Config.MediaType
	}
	return out, nil
}

// subjectMemo remembers the subject of each manifest read for the
// referrers API, for at most limit manifests (beyond, an arbitrary one is
// forgotten).
type subjectMemo struct {
	limit int

	mu sync.Mutex
	m  map[v1.Hash]v1.Hash // manifest → subject; the zero Hash: none
}

func newSubjectMemo(limit int) *subjectMemo {
	return &subjectMemo{limit: limit, m: map[v1.Hash]v1.Hash{}}
}

func (m *subjectMemo) get(d v1.Hash) (v1.Hash, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[d]
	return s, ok
}

func (m *subjectMemo) put(d, subject v1.Hash) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[d]; !ok && len(m.m) >= m.limit {
		for k := range m.m {
			delete(m.m, k)
			break
		}
	}
	m.m[d] = subject
}

// pullReferrers asks the peers for the referrers of subject and fetches
// those the node lacks under repo into the cache, each verified against
// its digest, at most peerReferrersMax. Concurrent requests for the same
// list share one fetch.
func (s *Server) pullReferrers(ctx context.Context, name, ns, repo string, subject v1.Hash, artifactType string) error {
	key := "referrers " + repo + "@" + subject.String() + "?" + artifactType
	return s.fetches.do(ctx, key, func() error {
		var errs []error
		fetched := 0
		for _, base := range s.peers.bases {
			descs, err := s.peers.referrers(ctx, base, name, ns, subject, artifactType)
			if err != nil {
				s.logPeerError(err, "referrers", repo+"@"+subject.String())
				errs = append(errs, err)
				continue
			}
			for _, d := range descs {
				if fetched == peerReferrersMax {
					s.log.Warn("registry: peers list more referrers than one request fetches; the rest are left",
						"repository", repo, "subject", subject, "max", peerReferrersMax)
					return errors.Join(errs...)
				}
				if _, err := s.resolve(ctx, repo, d.Digest.String()); err == nil {
					continue
				}
				if _, err := s.pullManifest(ctx, name, ns, repo, d.Digest.String()); err != nil {
					errs = append(errs, err)
					continue
				}
				fetched++
			}
		}
		if fetched > 0 {
			s.log.Debug("registry: referrers fetched from peers", "repository", repo, "subject", subject, "fetched", fetched)
		}
		return errors.Join(errs...)
	})
}

// referrers asks the peer at base for the referrers of subject (of
// artifactType, unless empty) and returns the descriptors it lists that
// could name a manifest (see parsePeerReferrers).
func (p *peerClient) referrers(ctx context.Context, base *url.URL, name, ns string, subject v1.Hash, artifactType string) ([]v1.Descriptor, error) {
	query := url.Values{}
	if ns != "" {
		query.Set("ns", ns)
	}
	if artifactType != "" {
		query.Set(filterArtifactType, artifactType)
	}
	resp, err := p.getQuery(ctx, base, name, "referrers", subject.String(), query, string(types.OCIImageIndex))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("peer %s: read the referrers of %s: %w", base.Host, subject, err)
	}
	if len(raw) > maxManifestSize {
		return nil, fmt.Errorf("peer %s: the referrers of %s: more than %d bytes", base.Host, subject, maxManifestSize)
	}
	descs, err := parsePeerReferrers(raw)
	if err != nil {
		return nil, fmt.Errorf("peer %s: the referrers of %s: %w", base.Host, subject, err)
	}
	return descs, nil
}

// parsePeerReferrers reads a peer's referrers index. It keeps the
// descriptors that could name a manifest (a manifest media type, a digest
// that can be checked, a size of at most maxManifestSize), each once and
// at most peerReferrersMax; nothing else of them is used, as what a
// referrer is gets read from its content once fetched.
func parsePeerReferrers(raw []byte) ([]v1.Descriptor, error) {
	var idx struct {
		Manifests []struct {
			MediaType types.MediaType `json:"mediaType"`
			Digest    string          `json:"digest"`
			Size      int64           `json:"size"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("parse index: %w", err)
	}
	out := []v1.Descriptor{}
	seen := map[v1.Hash]bool{}
	for _, m := range idx.Manifests {
		d, err := parseDigest(m.Digest)
		if err != nil || seen[d] || !isManifestType(m.MediaType) || m.Size <= 0 || m.Size > maxManifestSize {
			continue
		}
		seen[d] = true
		out = append(out, v1.Descriptor{MediaType: m.MediaType, Digest: d, Size: m.Size})
		if len(out) == peerReferrersMax {
			break
		}
	}
	return out, nil
}
