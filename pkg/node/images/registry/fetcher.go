package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Fetcher fetches content by digest from other nodes' registries directly,
// for content a node keeps outside its registry's cache (the upgrade files
// of pkg/node/images/upgradeshare). It asks each peer in turn, as one registry
// asks another (peers do not ask their own peers in turn).
type Fetcher struct {
	peers *peerClient
}

// NewFetcher asks the registries at peers (base URLs such as
// "https://10.0.0.11:5443") over tlsConfig (nil for plain http).
func NewFetcher(peers []string, tlsConfig *tls.Config) (*Fetcher, error) {
	var bases []*url.URL
	for _, p := range peers {
		u, err := url.Parse(strings.TrimSuffix(p, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("registry fetcher: %q is not an http(s) base URL", p)
		}
		bases = append(bases, u)
	}
	if len(bases) == 0 {
		return nil, errors.New("registry fetcher: no peers to ask")
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &Fetcher{peers: newPeerClient(bases, tlsConfig)}, nil
}

// splitRepo splits "host/path" into the name and ns of a request.
func splitRepo(repo string) (name, ns string) {
	first, rest, ok := strings.Cut(repo, "/")
	if ok && hostLike(first) {
		return rest, first
	}
	return repo, ""
}

// Manifest fetches the manifest of repo with digest d from the first peer
// that serves an intact copy, and names that peer.
func (f *Fetcher) Manifest(ctx context.Context, repo string, d v1.Hash) (raw []byte, peer string, err error) {
	name, ns := splitRepo(repo)
	var errs []error
	for _, base := range f.peers.bases {
		_, raw, err := f.peers.manifest(ctx, base, name, ns, d.String())
		if err == nil {
			return raw, base.String(), nil
		}
		errs = append(errs, err)
	}
	return nil, "", fmt.Errorf("fetch %s@%s: %w", repo, d, errors.Join(errs...))
}

// Blob opens the blob d of repo at peer (a base URL Manifest named), or,
// when that peer does not serve it, at the next peer that does. The
// caller checks what it reads against d.
func (f *Fetcher) Blob(ctx context.Context, peer, repo string, d v1.Hash) (io.ReadCloser, int64, error) {
	name, ns := splitRepo(repo)
	bases := append([]*url.URL(nil), f.peers.bases...)
	for i, base := range bases { // the manifest's peer first
		if base.String() == peer {
			bases[0], bases[i] = bases[i], bases[0]
		}
	}
	var errs []error
	for _, base := range bases {
		resp, err := f.peers.get(ctx, base, name, ns, "blobs", d.String(), "")
		if err == nil {
			return resp.Body, resp.ContentLength, nil
		}
		errs = append(errs, err)
	}
	return nil, 0, fmt.Errorf("fetch blob %s of %s: %w", d, repo, errors.Join(errs...))
}

// Peers names the peers, by the base URLs Manifest names them with.
func (f *Fetcher) Peers() []string {
	out := make([]string, 0, len(f.peers.bases))
	for _, b := range f.peers.bases {
		out = append(out, b.String())
	}
	return out
}

// CloseIdleConnections closes the kept-alive connections to the peers.
func (f *Fetcher) CloseIdleConnections() { f.peers.client.CloseIdleConnections() }
