package registry

import (
	"context"
	"io"
	"net/http"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// streamMin is the least size of a blob that a whole GET sends while it
// hashes it (streamVerified) the first time it is served, instead of
// hashing it whole before the response's first byte: an upgrade file of
// 850 MiB is then read once, not twice, and its fetching peer, which
// waits 30 s for the response headers, gets them at once.
const streamMin = 4 << 20

// unhashed is content not yet known to match its digest, from source src.
type unhashed struct {
	c   *Content
	src source
	key string
}

// openUnhashed returns the content a whole GET of blob d is to stream
// while hashing it: that of the first store holding d whose outcome the
// verifier does not know, when it has at least streamMin bytes. It
// returns nil when the first store to hold d is known to hold it intact,
// or holds less (openVerified then serves it as before), or no store
// holds it; a store known to hold it corrupt is passed over.
func (s *Server) openUnhashed(ctx context.Context, d v1.Hash) *unhashed {
	for _, src := range s.sources {
		c, err := src.store.Open(ctx, d)
		if err != nil {
			continue // openVerified logs what it finds
		}
		key := src.key + "@" + d.String()
		ok, known := s.verify.lookup(key)
		switch {
		case known && !ok:
			_ = c.Close() // read only
			continue
		case known || c.Size < streamMin:
			_ = c.Close() // read only
			return nil
		}
		return &unhashed{c: c, src: src, key: key}
	}
	return nil
}

// streamVerified sends u's content as the answer to a whole GET of blob
// d, hashing it as it goes, and holds its last byte back until the hash
// is known: content that matches is sent whole and remembered as
// verified; content that does not is never sent whole (the connection is
// cut before its last byte, which a client that reads to the length
// the headers gave takes for a failure), and is remembered as corrupt
// (a cache copy is deleted), as openVerified does. A read error cuts the
// connection too.
func (s *Server) streamVerified(w http.ResponseWriter, u *unhashed, d v1.Hash) {
	size := u.c.Size
	s.stats.verifications.Add(1)
	s.stats.verifiedBytes.Add(size)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Docker-Content-Digest", d.String())
	h.Set("ETag", `"`+d.String()+`"`)
	h.Set("Cache-Control", "max-age=31536000")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	hasher, err := v1.Hasher(d.Algorithm)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if _, err := io.CopyBuffer(w, io.TeeReader(io.LimitReader(u.c.Body, size-1), hasher), make([]byte, hashBufSize)); err != nil {
		s.log.Debug("registry: stream blob", "digest", d, "path", u.c.Path, "err", err)
		panic(http.ErrAbortHandler) // a client gone, or content unreadable: nothing learned
	}
	last := make([]byte, 1)
	if _, err := io.ReadFull(u.c.Body, last); err != nil {
		s.log.Warn("registry: stream blob", "digest", d, "path", u.c.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	hasher.Write(last)
	if err := compareSum(hasher, d); err != nil {
		s.stats.mismatches.Add(1)
		s.log.Error("registry: content does not match its digest; not serving it",
			"store", u.src.key, "digest", d, "path", u.c.Path, "err", err)
		s.forgetCorrupt(u.src, u.key, d)
		panic(http.ErrAbortHandler)
	}
	s.verify.markGood(u.key)
	_, _ = w.Write(last) // a client gone now has had all but one byte, and its own error
}
