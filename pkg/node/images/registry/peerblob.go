package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
)

// DefaultPeerBlobLimit caps a blob fetched from a peer whose size the node
// does not know (WithPeerBlobLimit): no manifest in its cache lists it,
// and the peer sends no Content-Length. A blob a cached manifest lists is
// read to exactly its descriptor's size instead, however large.
const DefaultPeerBlobLimit = 8 << 30

// peerSpaceStep is how much of a blob of unknown size is written between
// two free-space checks: the most it can eat into the reserve.
const peerSpaceStep = 64 << 20

// pullBlobFrom fetches the blob d from one peer into the cache. Every read
// is bounded: a blob whose size is known (size ≥ 0, from a manifest the
// cache holds) is read to exactly that size, and a Content-Length or a
// body of any other size is refused (ErrDigestMismatch); a blob of unknown
// size is read to the Content-Length if the peer sends one, never past the
// server's limit (ErrPeerBlobTooLarge). The free space beyond the reserve
// (WithPeerSpace) is checked before a byte is written, for the whole blob
// when its size is known and in steps of peerSpaceStep otherwise
// (diskspace.ErrNoSpace). The digest is checked as the blob is written;
// nothing is kept on any error.
func (s *Server) pullBlobFrom(ctx context.Context, base *url.URL, name, ns string, d v1.Hash, size int64) error {
	if s.cache.present(d, size) {
		return nil
	}
	fail := func(err error) error { return fmt.Errorf("peer %s: blob %s: %w", base.Host, d, err) }
	if size >= 0 {
		if err := s.checkPeerSpace(uint64(size), false); err != nil { //nolint:gosec // size ≥ 0
			return fail(err)
		}
	}
	resp, err := s.peers.get(ctx, base, name, ns, "blobs", d.String(), "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := &peerBody{r: resp.Body, want: size, max: s.peerBlobMax, wantFrom: "the manifest's descriptor gives it"}
	switch cl := resp.ContentLength; {
	case cl < 0:
	case size >= 0 && cl != size:
		return fail(fmt.Errorf("the peer says %d bytes (Content-Length), the manifest's descriptor says %d: %w", cl, size, ErrDigestMismatch))
	case size < 0 && cl > s.peerBlobMax:
		return fail(fmt.Errorf("the peer says %d bytes (Content-Length), more than %s, and no manifest in this node's cache gives the blob's size: %w",
			cl, diskspace.Size(uint64(s.peerBlobMax)), ErrPeerBlobTooLarge)) //nolint:gosec // a limit is positive
	case size < 0:
		if err := s.checkPeerSpace(uint64(cl), false); err != nil {
			return fail(err)
		}
		body.want, body.wantFrom = cl, "of its Content-Length" // net/http reads no more, and fails a shorter body
	}
	if body.want >= 0 {
		body.granted = body.want // checked above
	} else {
		body.grant = func(n int64) error { return s.checkPeerSpace(uint64(n), true) } //nolint:gosec // a step is positive
	}
	if _, err := s.cache.put(ctx, d, body.want, body); err != nil {
		if body.err != nil {
			err = body.err // put's own wrapping names the digest again
		}
		return fail(err)
	}
	return nil
}

// checkPeerSpace refuses n more bytes of a blob from a peer (all of it,
// or the next part of one of unknown size) when they would leave less
// than the reserve free on the cache's file system.
func (s *Server) checkPeerSpace(n uint64, part bool) error {
	what := "writing it into the cache"
	if part {
		what = "writing the next part of it into the cache (its size is not known)"
	}
	return diskspace.Check(s.peerSpace, diskspace.Need{
		What: what, Path: s.cache.dir, Bytes: n, Reserve: s.peerReserve,
		Fix: "free space on the node (images it no longer runs)",
	})
}

// peerBody is a blob's body from a peer, read through a size limit: want
// bytes exactly (its descriptor's size or Content-Length), or, when want
// is -1, at most max. An overlong body is cut at the limit with an error,
// a short one ends with an error instead of EOF. Bytes past granted are
// read only after grant (the free-space check) allows the next step.
type peerBody struct {
	r         io.Reader
	want, max int64
	wantFrom  string // where want comes from, for messages
	n         int64  // bytes read
	granted   int64
	grant     func(n int64) error
	err       error // the first error of its own
}

func (b *peerBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	limit := b.max
	if b.want >= 0 {
		limit = b.want
	}
	if b.n >= b.granted && b.granted < limit {
		step := min(peerSpaceStep, limit-b.granted)
		if err := b.grant(step); err != nil {
			b.err = err
			return 0, err
		}
		b.granted += step
	}
	room := b.granted - b.n
	if b.granted >= limit {
		room++ // one byte past the limit tells an overlong body
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	k, err := b.r.Read(p)
	b.n += int64(k)
	switch {
	case b.n > limit:
		b.err = b.tooLong()
		return k - int(b.n-limit), b.err
	case errors.Is(err, io.EOF) && b.want >= 0 && b.n < b.want:
		b.err = fmt.Errorf("the body ended after %d of the %d bytes %s: %w", b.n, b.want, b.wantFrom, ErrDigestMismatch)
		return k, b.err
	case err != nil && !errors.Is(err, io.EOF):
		b.err = fmt.Errorf("reading the body after %d bytes: %w", b.n, err)
		return k, b.err
	}
	return k, err
}

func (b *peerBody) tooLong() error {
	if b.want >= 0 {
		return fmt.Errorf("the body is longer than the %d bytes %s: %w", b.want, b.wantFrom, ErrDigestMismatch)
	}
	return fmt.Errorf("the peer sent more than %s with no Content-Length, and no manifest in this node's cache gives the blob's size: %w",
		diskspace.Size(uint64(b.max)), ErrPeerBlobTooLarge) //nolint:gosec // a limit is positive
}

// blobSize is the size the manifests the cache holds under repo give the
// blob d (an image's config or layer, a blob an index lists, or a manifest
// itself), or -1 when none lists it: a client may ask for a blob whose
// manifest it fetched elsewhere.
func (c *Cache) blobSize(repo string, d v1.Hash) int64 {
	c.mu.RLock()
	if m, ok := c.cat.digests[repo][d]; ok {
		c.mu.RUnlock()
		return m.Size
	}
	manifests := make([]v1.Hash, 0, len(c.cat.digests[repo]))
	for h := range c.cat.digests[repo] {
		manifests = append(manifests, h)
	}
	c.mu.RUnlock()
	for _, h := range manifests {
		raw, err := c.readManifest(h)
		if err != nil {
			continue // a child of an index the cache lacks
		}
		if size, ok := listedSize(raw, d); ok {
			return size
		}
	}
	return -1
}

// listedSize finds d among the descriptors a manifest or index lists.
func listedSize(raw []byte, d v1.Hash) (int64, bool) {
	var m struct {
		Config    *v1.Descriptor  `json:"config"`
		Layers    []v1.Descriptor `json:"layers"`
		Manifests []v1.Descriptor `json:"manifests"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return 0, false
	}
	descs := append(m.Layers, m.Manifests...)
	if m.Config != nil {
		descs = append(descs, *m.Config)
	}
	for _, desc := range descs {
		if desc.Digest == d && desc.Size >= 0 {
			return desc.Size, true
		}
	}
	return 0, false
}
