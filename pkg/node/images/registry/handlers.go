package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Error codes from the OCI Distribution spec.
const (
	codeManifestUnknown = "MANIFEST_UNKNOWN"
	codeBlobUnknown     = "BLOB_UNKNOWN"
	codeNameUnknown     = "NAME_UNKNOWN"
	codeNameInvalid     = "NAME_INVALID"
	codeDigestInvalid   = "DIGEST_INVALID"
	codeUnsupported     = "UNSUPPORTED"
	codeUnknown         = "UNKNOWN"
)

// mismatchDetail is the error detail for content that failed verification.
const mismatchDetail = "content does not match its digest"

type regError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  string `json:"detail,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code, message, detail string) {
	body, _ := json.Marshal(struct {
		Errors []regError `json:"errors"`
	}{[]regError{{Code: code, Message: message, Detail: detail}}})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeUnknown, "encode response", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func (s *Server) serveManifest(w http.ResponseWriter, r *http.Request, name, ns, ref string) {
	ctx := r.Context()
	if isDigestRef(ref) {
		if _, err := parseDigest(ref); err != nil {
			writeError(w, http.StatusBadRequest, codeDigestInvalid, "invalid digest", err.Error())
			return
		}
	}
	repo := s.fullRepo(ctx, name, ns)
	desc, rerr := s.resolve(ctx, repo, ref)
	var oerr error
	if rerr == nil {
		c, err := s.openVerified(ctx, desc.Digest)
		if err == nil {
			defer c.Close()
			if desc.MediaType == "" {
				desc.MediaType = sniff(c)
			}
			serveContent(w, r, c, string(desc.MediaType), desc.Digest)
			return
		}
		oerr = err
		ref = desc.Digest.String() // fetch the content we know we want
	}
	var perr error
	if s.peers != nil && !fromPeer(r) {
		var pdesc v1.Descriptor
		if pdesc, perr = s.pullManifest(ctx, name, ns, repo, ref); perr == nil {
			var c *Content
			if c, perr = s.openVerified(ctx, pdesc.Digest); perr == nil {
				defer c.Close()
				serveContent(w, r, c, string(pdesc.MediaType), pdesc.Digest)
				return
			}
		}
		s.log.Debug("registry: manifest not available from peers", "repository", repo, "reference", ref, "err", perr)
	}
	switch {
	case errors.Is(oerr, ErrDigestMismatch) || errors.Is(perr, ErrDigestMismatch):
		writeError(w, http.StatusNotFound, codeManifestUnknown, "manifest unknown", mismatchDetail)
	case oerr != nil && !errors.Is(oerr, ErrNotFound):
		writeError(w, http.StatusInternalServerError, codeUnknown, "read manifest", oerr.Error())
	case errors.Is(rerr, ErrUnknownRepository):
		writeError(w, http.StatusNotFound, codeNameUnknown, "repository name not known to registry", repo)
	default:
		writeError(w, http.StatusNotFound, codeManifestUnknown, "manifest unknown", repo+" "+ref)
	}
}

func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, name, ns, digest string) {
	ctx := r.Context()
	d, err := parseDigest(digest)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeDigestInvalid, "invalid digest", err.Error())
		return
	}
	if wholeGet(r) {
		if u := s.openUnhashed(ctx, d); u != nil {
			defer u.c.Close()
			s.streamVerified(w, u, d)
			return
		}
	}
	c, oerr := s.openVerified(ctx, d)
	if oerr != nil && s.peers != nil && !fromPeer(r) {
		if err := s.pullBlob(ctx, name, ns, d); err == nil {
			c, oerr = s.openVerified(ctx, d)
		} else {
			s.log.Debug("registry: blob not available from peers", "digest", d, "err", err)
			if errors.Is(err, ErrDigestMismatch) {
				oerr = err
			}
		}
	}
	switch {
	case oerr == nil:
		defer c.Close()
		w.Header().Set("Cache-Control", "max-age=31536000")
		serveContent(w, r, c, "application/octet-stream", d)
	case errors.Is(oerr, ErrDigestMismatch):
		writeError(w, http.StatusNotFound, codeBlobUnknown, "blob unknown to registry", mismatchDetail)
	case errors.Is(oerr, ErrNotFound):
		writeError(w, http.StatusNotFound, codeBlobUnknown, "blob unknown to registry", d.String())
	default:
		writeError(w, http.StatusInternalServerError, codeUnknown, "read blob", oerr.Error())
	}
}

// serveContent serves verified content; http.ServeContent handles HEAD,
// Range and conditional requests, and an *os.File body goes out through
// sendfile.
func serveContent(w http.ResponseWriter, r *http.Request, c *Content, mediaType string, d v1.Hash) {
	contentHeaders(w.Header(), mediaType, d)
	http.ServeContent(w, r, "", time.Time{}, c.Body)
}

// contentHeaders are the headers of content of digest d, served whole or
// streamed (streamVerified).
func contentHeaders(h http.Header, mediaType string, d v1.Hash) {
	h.Set("Content-Type", mediaType)
	h.Set("Docker-Content-Digest", d.String())
	h.Set("ETag", `"`+d.String()+`"`)
}

// resolve asks each local store in turn. The error matches
// ErrUnknownRepository if no store knows the repository.
func (s *Server) resolve(ctx context.Context, repo, ref string) (v1.Descriptor, error) {
	unknownRepo := true
	for _, src := range s.sources {
		desc, err := src.store.Resolve(ctx, repo, ref)
		if err == nil {
			return desc, nil
		}
		if !errors.Is(err, ErrUnknownRepository) {
			unknownRepo = false
		}
		if !errors.Is(err, ErrNotFound) {
			s.log.Warn("registry: resolve", "store", src.key, "repository", repo, "reference", ref, "err", err)
		}
	}
	if unknownRepo {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", repo, ErrUnknownRepository)
	}
	return v1.Descriptor{}, fmt.Errorf("%s %s: %w", repo, ref, ErrNotFound)
}

// openVerified opens content by digest from the first local store that has
// it intact. Content is hashed the first time it is served (but for a
// store whose readers check it, WithReaderCheckedStores); corrupt content
// is logged and skipped (and deleted, if in the cache). The error matches
// ErrDigestMismatch if only corrupt copies were found, else ErrNotFound.
func (s *Server) openVerified(ctx context.Context, d v1.Hash) (*Content, error) {
	mismatch := false
	for _, src := range s.sources {
		c, err := src.store.Open(ctx, d)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				s.log.Warn("registry: open", "store", src.key, "digest", d, "err", err)
			}
			continue
		}
		if src.readerChecked {
			return c, nil
		}
		key := src.key + "@" + d.String()
		hashed, err := s.verify.verify(ctx, key, c, d, !src.cache)
		if err == nil {
			return c, nil
		}
		// verify has closed c (or will, once hashing it handed on ends).
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, ErrDigestMismatch) {
			s.log.Warn("registry: verify", "store", src.key, "digest", d, "path", c.Path, "err", err)
			continue
		}
		mismatch = true
		if hashed {
			s.log.Error("registry: content does not match its digest; not serving it",
				"store", src.key, "digest", d, "path", c.Path, "err", err)
		}
		if src.cache {
			s.removeCorrupt(key, d)
		}
	}
	if mismatch {
		return nil, fmt.Errorf("%s: %w", d, ErrDigestMismatch)
	}
	return nil, fmt.Errorf("%s: %w", d, ErrNotFound)
}

// removeCorrupt deletes the cache's copy of digest d (its verifier key
// key), which does not match it, to be fetched again.
func (s *Server) removeCorrupt(key string, d v1.Hash) {
	s.verify.forget(key)
	if err := s.cache.remove(d); err != nil {
		s.log.Warn("registry: remove corrupt cache blob", "digest", d, "err", err)
	}
}

// sniff reads the media type of a manifest whose descriptor lacks one.
func sniff(c *Content) types.MediaType {
	defer func() { _, _ = c.Body.Seek(0, io.SeekStart) }()
	raw, err := io.ReadAll(io.LimitReader(c.Body, maxManifestSize))
	if err != nil {
		return "application/json"
	}
	if mt := sniffMediaType(raw); mt != "" {
		return mt
	}
	return "application/json"
}

func (s *Server) serveTags(w http.ResponseWriter, r *http.Request, name, ns string) {
	ctx := r.Context()
	repo := s.fullRepo(ctx, name, ns)
	var tags []string
	known := false
	for _, src := range s.sources {
		l, ok := src.store.(Lister)
		if !ok {
			continue
		}
		t, err := l.Tags(ctx, repo)
		if err != nil {
			continue
		}
		known = true
		tags = append(tags, t...)
	}
	if !known {
		writeError(w, http.StatusNotFound, codeNameUnknown, "repository name not known to registry", repo)
		return
	}
	slices.Sort(tags)
	tags = paginate(slices.Compact(tags), r)
	writeJSON(w, struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}{name, tags})
}

func (s *Server) serveCatalog(w http.ResponseWriter, r *http.Request) {
	repos := s.repositories(r.Context())
	slices.Sort(repos)
	writeJSON(w, struct {
		Repositories []string `json:"repositories"`
	}{paginate(repos, r)})
}

// paginate applies the n and last query parameters to a sorted list.
func paginate(list []string, r *http.Request) []string {
	q := r.URL.Query()
	if last := q.Get("last"); last != "" {
		i, _ := slices.BinarySearch(list, last)
		for i < len(list) && list[i] <= last {
			i++
		}
		list = list[i:]
	}
	if n, err := strconv.Atoi(q.Get("n")); err == nil && n >= 0 && n < len(list) {
		list = list[:n]
	}
	if list == nil {
		list = []string{}
	}
	return list
}

// mediaTypeOf strips parameters from a Content-Type header.
func mediaTypeOf(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	return mt
}
