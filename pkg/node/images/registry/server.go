package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// Server serves its stores over the pull side of the OCI Distribution API,
// the referrers API included (from the stores that are ManifestListers).
// It is read-only: pushes and deletes are refused with 405.
type Server struct {
	log     *slog.Logger
	sources []source
	cache   *Cache
	peers   *peerClient
	verify  *verifier
	fetches flightGroup
	stats   counters
	// subjects remembers the subjects of manifests, for the referrers API.
	subjects *subjectMemo
	// What a blob from a peer may take (WithPeerSpace, WithPeerBlobLimit).
	peerSpace   diskspace.FS
	peerReserve uint64
	peerBlobMax int64
}

var _ http.Handler = (*Server)(nil)

// source is a local store, with the key its content is remembered under.
type source struct {
	key   string
	store Store
	cache bool // the writable cache: corrupt content is deleted
	// readerChecked content is served unhashed (WithReaderCheckedStores).
	readerChecked bool
}

// New creates a Server. Stores (WithStores) are consulted in order, then the
// cache (WithCache), then peers (WithPeers), whatever the order of the
// options: a tag the slot's bundle (a store) holds is always served from it,
// never from the cache, and short names resolve to its repositories first.
func New(opts ...Option) (*Server, error) {
	o, err := applyOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if len(o.cacheOnly) > 0 {
		return nil, fmt.Errorf("registry: options %s only apply to OpenCache", strings.Join(o.cacheOnly, ", "))
	}
	if len(o.peers) > 0 && o.cache == nil {
		return nil, errors.New("registry: WithPeers needs WithCache to keep what it fetches")
	}
	s := &Server{log: o.log, cache: o.cache, subjects: newSubjectMemo(subjectMemoMax),
		peerSpace: o.peerSpace, peerReserve: o.peerReserve, peerBlobMax: o.peerBlobMax}
	s.verify = newVerifier(o.verifiedLimit, &s.stats)
	for i, st := range o.stores {
		if c, ok := st.(*Cache); ok && c == o.cache {
			continue // added last, below
		}
		s.sources = append(s.sources, source{key: fmt.Sprintf("store%d", i), store: st, readerChecked: o.readerChecked[st]})
	}
	if o.cache != nil {
		s.sources = append(s.sources, source{key: "cache", store: o.cache, cache: true})
	}
	if len(s.sources) == 0 && len(o.peers) == 0 {
		return nil, errors.New("registry: no stores")
	}
	if len(o.peers) > 0 {
		s.peers = newPeerClient(o.peers, o.peerTLS)
	}
	return s, nil
}

// Stats reports counters since the server was created.
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// ServeHTTP implements http.Handler. It may panic with
// http.ErrAbortHandler to cut a blob's response short (streamVerified):
// a handler wrapping it must let that panic through to net/http, which
// closes the connection, and never write the rest of such a response.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	rt, ok := parseRoute(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, codeUnsupported, "unknown endpoint", r.URL.Path)
		return
	}
	if rt.kind == routeUpload || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, codeUnsupported, "this registry is read-only", r.Method+" "+r.URL.Path)
		return
	}
	ns := r.URL.Query().Get("ns")
	if rt.kind != routePing && rt.kind != routeCatalog {
		if !validName(rt.name) || (ns != "" && !validHost(ns)) {
			writeError(w, http.StatusBadRequest, codeNameInvalid, "invalid repository name", rt.name)
			return
		}
	}
	switch rt.kind {
	case routePing:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	case routeCatalog:
		s.serveCatalog(w, r)
	case routeTags:
		s.serveTags(w, r, rt.name, ns)
	case routeManifest:
		s.serveManifest(w, r, rt.name, ns, rt.ref)
	case routeBlob:
		s.serveBlob(w, r, rt.name, ns, rt.ref)
	case routeReferrers:
		s.serveReferrers(w, r, rt.name, ns, rt.ref)
	default:
		writeError(w, http.StatusNotFound, codeUnsupported, "unsupported endpoint", r.URL.Path)
	}
}

type routeKind int

const (
	routePing routeKind = iota
	routeCatalog
	routeTags
	routeManifest
	routeBlob
	routeUpload
	routeReferrers
)

type route struct {
	kind routeKind
	name string
	ref  string // tag or digest
}

// parseRoute splits a /v2/ path. Repository names may contain slashes, so
// the last of the known separators wins.
func parseRoute(p string) (route, bool) {
	if p == "/v2" || p == "/v2/" {
		return route{kind: routePing}, true
	}
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return route{}, false
	}
	if rest == "_catalog" {
		return route{kind: routeCatalog}, true
	}
	if name, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		return route{kind: routeTags, name: name}, true
	}
	if i := strings.LastIndex(rest, "/blobs/uploads"); i >= 0 {
		return route{kind: routeUpload, name: rest[:i]}, true
	}
	best := route{}
	at := -1
	for _, sep := range []struct {
		s    string
		kind routeKind
	}{{"/manifests/", routeManifest}, {"/blobs/", routeBlob}, {"/referrers/", routeReferrers}} {
		i := strings.LastIndex(rest, sep.s)
		if i > at {
			at = i
			best = route{kind: sep.kind, name: rest[:i], ref: rest[i+len(sep.s):]}
		}
	}
	if at < 0 || best.ref == "" || strings.Contains(best.ref, "/") {
		return route{}, false
	}
	return best, true
}

// validName checks a repository name loosely: non-empty path components of
// lower-case letters, digits and separators; the first component may also
// be a registry host.
func validName(name string) bool {
	if name == "" || len(name) > 1024 {
		return false
	}
	for i, c := range strings.Split(name, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
		for _, r := range c {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			case i == 0 && (r == ':' || (r >= 'A' && r <= 'Z')):
			default:
				return false
			}
		}
	}
	return true
}

// validHost checks the ns query parameter: a registry host, maybe a port.
func validHost(h string) bool {
	if len(h) > 255 {
		return false
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.', r == '-', r == ':', r == '[', r == ']':
		default:
			return false
		}
	}
	return h != ""
}

// fullRepo maps a request's name (and ns parameter) to a full repository:
// ns/name when ns is given; name when it starts with a registry host;
// otherwise the one known repository whose path after the host is name.
// Stores are asked in order and the first that knows the path decides, so
// a side-load in the cache cannot make a name of the slot's bundle
// ambiguous.
func (s *Server) fullRepo(ctx context.Context, name, ns string) string {
	if ns != "" {
		return ns + "/" + name
	}
	first, _, _ := strings.Cut(name, "/")
	if hostLike(first) {
		return name
	}
	for _, src := range s.sources {
		var matches []string
		for _, r := range s.repositoriesOf(ctx, src) {
			if r == name {
				return r
			}
			if repoPath(r) == name {
				matches = append(matches, r)
			}
		}
		if len(matches) == 1 {
			return matches[0]
		}
		if len(matches) > 1 {
			s.log.Debug("registry: ambiguous repository name", "name", name, "store", src.key, "matches", matches)
			return name
		}
	}
	return name
}

// repositories lists the repositories of every local store that can list.
func (s *Server) repositories(ctx context.Context) []string {
	seen := map[string]bool{}
	var out []string
	for _, src := range s.sources {
		for _, r := range s.repositoriesOf(ctx, src) {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// repositoriesOf lists one store's repositories (none if it cannot list).
func (s *Server) repositoriesOf(ctx context.Context, src source) []string {
	l, ok := src.store.(Lister)
	if !ok {
		return nil
	}
	repos, err := l.Repositories(ctx)
	if err != nil {
		s.log.Warn("registry: list repositories", "store", src.key, "err", err)
		return nil
	}
	return repos
}
