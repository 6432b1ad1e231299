package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// peerHeader marks requests from one registry to another, so a peer does
// not in turn ask its own peers (which could loop between control planes).
const peerHeader = "X-Terrarium-Registry-Peer"

func fromPeer(r *http.Request) bool { return r.Header.Get(peerHeader) != "" }

var manifestAccept = strings.Join([]string{
	string(types.OCIImageIndex),
	string(types.OCIManifestSchema1),
	string(types.DockerManifestList),
	string(types.DockerManifestSchema2),
}, ", ")

// peerClient fetches from other nodes' registries.
type peerClient struct {
	bases  []*url.URL
	client *http.Client
}

func newPeerClient(bases []*url.URL, tlsConfig *tls.Config) *peerClient {
	tr := &http.Transport{
		Proxy:                 nil, // air-gapped: peers are always direct
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig.Clone(),
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   8,
		ForceAttemptHTTP2:     true,
	}
	return &peerClient{bases: bases, client: &http.Client{Transport: tr}}
}

// get fetches /v2/<name>/<kind>/<ref>[?ns=] from one peer; any status but
// 200 is an error (matching ErrNotFound for 404).
func (p *peerClient) get(ctx context.Context, base *url.URL, name, ns, kind, ref, accept string) (*http.Response, error) {
	query := url.Values{}
	if ns != "" {
		query.Set("ns", ns)
	}
	return p.getQuery(ctx, base, name, kind, ref, query, accept)
}

// getQuery is get with the request's query parameters (ns among them).
func (p *peerClient) getQuery(ctx context.Context, base *url.URL, name, kind, ref string, query url.Values, accept string) (*http.Response, error) {
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + "/v2/" + name + "/" + kind + "/" + ref
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("peer request: %w", err)
	}
	req.Header.Set(peerHeader, "1")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", base.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close() // drained above; the status is the error
		err := fmt.Errorf("peer %s: GET %s: %s", base.Host, u.Path, resp.Status)
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", err, ErrNotFound)
		}
		return nil, err
	}
	return resp, nil
}

// manifest fetches a manifest and checks it against the digest asked for,
// or else the digest the peer claims for it.
func (p *peerClient) manifest(ctx context.Context, base *url.URL, name, ns, ref string) (v1.Descriptor, []byte, error) {
	resp, err := p.get(ctx, base, name, ns, "manifests", ref, manifestAccept)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestSize+1))
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("peer %s: read manifest: %w", base.Host, err)
	}
	if len(raw) > maxManifestSize {
		return v1.Descriptor{}, nil, fmt.Errorf("peer %s: manifest %s is too large", base.Host, ref)
	}
	want := resp.Header.Get("Docker-Content-Digest")
	if isDigestRef(ref) {
		want = ref
	}
	var d v1.Hash
	if want == "" {
		if d, _, err = v1.SHA256(bytes.NewReader(raw)); err != nil {
			return v1.Descriptor{}, nil, fmt.Errorf("peer %s: %w", base.Host, err)
		}
	} else if d, err = parseDigest(want); err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("peer %s: %w", base.Host, err)
	}
	if err := matchDigest(bytes.NewReader(raw), d); err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("peer %s: manifest %s: %w", base.Host, ref, err)
	}
	mt := peerManifestType(raw, resp.Header.Get("Content-Type"))
	if !isManifestType(mt) {
		return v1.Descriptor{}, nil, fmt.Errorf("peer %s: manifest %s has media type %q", base.Host, ref, mt)
	}
	return v1.Descriptor{MediaType: mt, Size: int64(len(raw)), Digest: d}, raw, nil
}

// peerManifestType is the media type a peer's manifest is kept and served
// under: its own mediaType field if it has one (clients such as containerd
// refuse a manifest served under another, and the cache would record the
// peer's word for good), else the peer's Content-Type if that is a
// manifest's, else what the manifest's fields suggest.
func peerManifestType(raw []byte, contentType string) types.MediaType {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if json.Unmarshal(raw, &m) == nil && m.MediaType != "" {
		return m.MediaType
	}
	if mt := types.MediaType(mediaTypeOf(contentType)); isManifestType(mt) {
		return mt
	}
	return sniffMediaType(raw)
}

// pullManifest fetches a manifest from the first peer that has an intact
// copy, stores it in the cache and records it under repo (and ref, if a tag).
func (s *Server) pullManifest(ctx context.Context, name, ns, repo, ref string) (v1.Descriptor, error) {
	var errs []error
	for _, base := range s.peers.bases {
		desc, raw, err := s.peers.manifest(ctx, base, name, ns, ref)
		if err == nil {
			err = s.cache.Put(ctx, desc, bytes.NewReader(raw))
		}
		if err != nil {
			s.logPeerError(err, "manifest", repo+" "+ref)
			errs = append(errs, err)
			continue
		}
		s.stats.peerFetches.Add(1)
		s.verify.markGood("cache@" + desc.Digest.String())
		tag := ref
		if isDigestRef(ref) {
			tag = ""
		}
		if err := s.cache.record(record{repo: repo, tag: tag, desc: desc, raw: raw}); err != nil {
			s.log.Warn("registry: record pulled manifest", "repository", repo, "reference", ref, "err", err)
		}
		return desc, nil
	}
	return v1.Descriptor{}, errors.Join(errs...)
}

// pullBlob fetches a blob from the first peer that has an intact copy into
// the cache. Concurrent requests for the same blob share one fetch. How
// much it reads from a peer is bounded (see pullBlobFrom).
func (s *Server) pullBlob(ctx context.Context, name, ns string, d v1.Hash) error {
	return s.fetches.do(ctx, d.String(), func() error {
		size := s.cache.blobSize(s.fullRepo(ctx, name, ns), d)
		var errs []error
		for _, base := range s.peers.bases {
			err := s.pullBlobFrom(ctx, base, name, ns, d, size)
			if err == nil {
				s.stats.peerFetches.Add(1)
				s.verify.markGood("cache@" + d.String())
				return nil
			}
			s.logPeerError(err, "blob", d.String())
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

func (s *Server) logPeerError(err error, what, ref string) {
	switch {
	case errors.Is(err, ErrDigestMismatch):
		s.log.Error("registry: peer sent content that does not match its digest; rejected", "what", what, "reference", ref, "err", err)
	case errors.Is(err, ErrNotFound), errors.Is(err, context.Canceled):
		s.log.Debug("registry: peer miss", "what", what, "reference", ref, "err", err)
	default:
		s.log.Warn("registry: peer fetch failed", "what", what, "reference", ref, "err", err)
	}
}

// flightGroup runs one function per key at a time; callers arriving while
// it runs wait for its result.
type flightGroup struct {
	mu sync.Mutex
	m  map[string]*flight
}

func (g *flightGroup) do(ctx context.Context, key string, fn func() error) error {
	for {
		g.mu.Lock()
		if g.m == nil {
			g.m = map[string]*flight{}
		}
		f, busy := g.m[key]
		if !busy {
			f = &flight{done: make(chan struct{})}
			g.m[key] = f
			g.mu.Unlock()
			f.err = fn()
			g.mu.Lock()
			delete(g.m, key)
			close(f.done)
			g.mu.Unlock()
			return f.err
		}
		g.mu.Unlock()
		select {
		case <-f.done:
			if !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded) {
				return f.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
