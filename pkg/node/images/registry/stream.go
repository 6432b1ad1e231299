package registry

import (
	"context"
	"errors"
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

// errStreamCut is the outcome of a stream that ended before its hash did
// (the client went away, or the content could not be read): nothing is
// learned, and a request waiting for it hashes the content itself.
var errStreamCut = errors.New("registry: the blob's stream was cut before its hash was known")

// wholeGet reports whether r asks for a blob whole and unconditionally:
// the only request streamVerified answers (a range, a HEAD or a
// conditional request is answered by http.ServeContent once the blob is
// hashed).
func wholeGet(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	for _, h := range []string{"Range", "If-Range", "If-None-Match", "If-Match", "If-Modified-Since", "If-Unmodified-Since"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	return true
}

// unhashed is content not yet known to match its digest, from source src,
// with the verifier's flight for it, which its stream settles.
type unhashed struct {
	c   *Content
	src source
	key string
	f   *flight
}

// openUnhashed returns the content a whole GET of blob d is to stream
// while hashing it: that of the first store holding d, when it has at
// least streamMin bytes and nothing is known of it, nor is it being
// hashed (the verifier's flight is then this request's). It returns nil
// when that store's content is known intact, or is being hashed, or is
// smaller, or is its readers' to check (WithReaderCheckedStores), or no
// store holds d: openVerified then serves it as before (a request
// meanwhile waits for the stream's hash). A store known to hold d corrupt
// is passed over.
func (s *Server) openUnhashed(ctx context.Context, d v1.Hash) *unhashed {
	for _, src := range s.sources {
		c, err := src.store.Open(ctx, d)
		if err != nil {
			continue // openVerified logs what it finds
		}
		if c.Size < streamMin || src.readerChecked {
			_ = c.Close() // read only
			return nil
		}
		key := src.key + "@" + d.String()
		f, ok, known := s.verify.claim(key)
		switch {
		case known && !ok:
			_ = c.Close() // read only
			continue
		case f == nil:
			_ = c.Close() // read only
			return nil
		}
		return &unhashed{c: c, src: src, key: key, f: f}
	}
	return nil
}

// streamVerified sends u's content as the answer to a whole GET of blob
// d, hashing it as it goes, and holds its last byte back until the hash
// is known: content that matches is sent whole and remembered as
// verified; content that does not is never sent whole (the connection is
// cut before its last byte: a client reading to the Content-Length the
// headers gave gets an unexpected EOF), and is remembered as corrupt (a
// cache copy is deleted, to be fetched again) and logged, as openVerified
// does. A client's retry is then answered by openVerified, from another
// store that holds the blob intact, if any. A read error cuts the
// connection too. Cutting it panics with http.ErrAbortHandler, which
// net/http recovers: nothing between it and the Server may recover it.
func (s *Server) streamVerified(w http.ResponseWriter, u *unhashed, d v1.Hash) {
	outcome := errStreamCut
	defer func() { s.verify.settle(u.key, u.f, outcome, !u.src.cache) }()
	hasher, err := v1.Hasher(d.Algorithm)
	if err != nil {
		outcome = err
		writeError(w, http.StatusBadRequest, codeDigestInvalid, "invalid digest", err.Error())
		return
	}
	size := u.c.Size
	s.stats.verifications.Add(1)
	s.stats.verifiedBytes.Add(size)
	h := w.Header()
	contentHeaders(h, "application/octet-stream", d)
	h.Set("Cache-Control", "max-age=31536000")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, io.TeeReader(io.LimitReader(u.c.Body, size-1), hasher)); err != nil {
		s.log.Debug("registry: stream blob", "digest", d, "path", u.c.Path, "err", err)
		panic(http.ErrAbortHandler) // a client gone, or content unreadable: nothing learned
	}
	last := make([]byte, 1)
	if _, err := io.ReadFull(u.c.Body, last); err != nil {
		s.log.Warn("registry: stream blob", "digest", d, "path", u.c.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	hasher.Write(last)
	if outcome = compareSum(hasher, d); outcome != nil {
		s.stats.mismatches.Add(1)
		s.log.Error("registry: content does not match its digest; not serving it",
			"store", u.src.key, "digest", d, "path", u.c.Path, "err", outcome)
		if u.src.cache {
			s.removeCorrupt(u.key, d)
		}
		panic(http.ErrAbortHandler)
	}
	_, _ = w.Write(last) // a client gone now has had all but one byte, and its own error
}
