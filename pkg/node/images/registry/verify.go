package registry

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// hashBufSize is the read size used when hashing files.
const hashBufSize = 1 << 20

// matchDigest hashes r to EOF and compares the result with want.
func matchDigest(r io.Reader, want v1.Hash) error {
	h, err := v1.Hasher(want.Algorithm)
	if err != nil {
		return fmt.Errorf("digest %s: %w", want, err)
	}
	if _, err := io.CopyBuffer(h, r, make([]byte, hashBufSize)); err != nil {
		return fmt.Errorf("hash %s: %w", want, err)
	}
	return compareSum(h, want)
}

func compareSum(h hash.Hash, want v1.Hash) error {
	got := fmt.Sprintf("%x", h.Sum(nil))
	if got != want.Hex {
		return fmt.Errorf("%w: want %s, got %s:%s", ErrDigestMismatch, want, want.Algorithm, got)
	}
	return nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context //nolint:containedctx // lives only for one copy
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Stats counts what a Server has done since it was created.
type Stats struct {
	// Verifications counts content hashed the first time it is served:
	// before it is sent, or (a big blob asked for whole) as it is sent.
	Verifications int64
	// VerifiedBytes is the total size of that content.
	VerifiedBytes int64
	// Mismatches counts content that did not match its digest.
	Mismatches int64
	// PeerFetches counts manifests and blobs fetched from peers.
	PeerFetches int64
}

type counters struct {
	verifications, verifiedBytes, mismatches, peerFetches atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Verifications: c.verifications.Load(),
		VerifiedBytes: c.verifiedBytes.Load(),
		Mismatches:    c.mismatches.Load(),
		PeerFetches:   c.peerFetches.Load(),
	}
}

// verifier remembers which content has been hashed, in a bounded map, and
// makes concurrent first requests for the same content hash it once.
type verifier struct {
	limit int
	stats *counters

	mu       sync.Mutex
	results  map[string]bool // key → content matched its digest
	order    []string        // insertion order, for eviction
	inflight map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error
	// abandoned is set, under verifier.mu, when the request that started
	// the hashing gave up before it ended.
	abandoned bool
}

func newVerifier(limit int, stats *counters) *verifier {
	return &verifier{
		limit:    limit,
		stats:    stats,
		results:  map[string]bool{},
		inflight: map[string]*flight{},
	}
}

// verify checks c against want unless the outcome for key is remembered,
// and reports whether it hashed c. rememberBad controls whether a mismatch
// is remembered too (it should not be for content about to be deleted).
// On success c's offset is left at the start and the caller keeps c; on
// error verify has closed c, or will once the hashing it handed on ends.
//
// The hashing outlives the request that started it: a client that gives
// up waiting (a peer waits 30 s for the response headers; hashing an
// upgrade file of several hundred MiB under emulation takes longer) does
// not cancel it, and its outcome is remembered for the client's retry.
func (v *verifier) verify(ctx context.Context, key string, c *Content, want v1.Hash, rememberBad bool) (bool, error) {
	var f *flight
	for {
		v.mu.Lock()
		if ok, known := v.results[key]; known {
			v.mu.Unlock()
			if ok {
				return false, nil
			}
			_ = c.Close() // read only
			return false, fmt.Errorf("%s: %w", want, ErrDigestMismatch)
		}
		var busy bool
		f, busy = v.inflight[key]
		if !busy {
			f = &flight{done: make(chan struct{})}
			v.inflight[key] = f
			v.mu.Unlock()
			break
		}
		v.mu.Unlock()
		select {
		case <-f.done:
			if f.err == nil || errors.Is(f.err, ErrDigestMismatch) {
				if f.err != nil {
					_ = c.Close() // read only
				}
				return false, f.err
			}
			// The other request failed for its own reasons: try ourselves.
		case <-ctx.Done():
			_ = c.Close() // read only
			return false, ctx.Err()
		}
	}

	go v.hashDetached(key, f, c, want, rememberBad)
	select {
	case <-f.done:
	case <-ctx.Done():
		if v.abandon(f) {
			return true, ctx.Err()
		}
	}
	if f.err != nil {
		_ = c.Close() // read only
	}
	return true, f.err
}

// abandon hands f's content to its hashing, which closes it when done,
// and reports true; it reports false if the hashing has already ended (the
// outcome is then the caller's after all).
func (v *verifier) abandon(f *flight) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-f.done:
		return false
	default:
		f.abandoned = true
		return true
	}
}

// hashDetached hashes c for f and records the outcome; it closes c if the
// request that started it gave up meanwhile.
func (v *verifier) hashDetached(key string, f *flight, c *Content, want v1.Hash, rememberBad bool) {
	if v.settle(key, f, v.hash(c, want), rememberBad) {
		_ = c.Close() // read only
	}
}

// claim starts a flight for key when nothing is known of its content and
// no hash of it is under way, for a caller that hashes it itself (a blob
// hashed as it is served) and then settles the flight: requests for the
// same content meanwhile wait for its outcome (verify). Otherwise it
// returns nil, and what is known: ok, and known.
func (v *verifier) claim(key string) (f *flight, ok, known bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if ok, known := v.results[key]; known {
		return nil, ok, true
	}
	if _, busy := v.inflight[key]; busy {
		return nil, false, false
	}
	f = &flight{done: make(chan struct{})}
	v.inflight[key] = f
	return f, false, false
}

// settle records err, the outcome of f's hash of key's content, and wakes
// the requests waiting for it; a mismatch is remembered under
// rememberBad, any other error not at all (a waiter then hashes the
// content itself). It reports whether the request that started the hash
// gave up meanwhile.
func (v *verifier) settle(key string, f *flight, err error, rememberBad bool) (abandoned bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.inflight, key)
	switch {
	case err == nil:
		v.store(key, true)
	case errors.Is(err, ErrDigestMismatch) && rememberBad:
		v.store(key, false)
	}
	f.err = err
	close(f.done)
	return f.abandoned
}

// hash reads c to its end whatever becomes of the request that wanted it
// (see verify).
func (v *verifier) hash(c *Content, want v1.Hash) error {
	v.stats.verifications.Add(1)
	v.stats.verifiedBytes.Add(c.Size)
	if _, err := c.Body.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("seek %s: %w", want, err)
	}
	err := matchDigest(c.Body, want)
	if errors.Is(err, ErrDigestMismatch) {
		v.stats.mismatches.Add(1)
	}
	if _, serr := c.Body.Seek(0, io.SeekStart); serr != nil && err == nil {
		err = fmt.Errorf("seek %s: %w", want, serr)
	}
	return err
}

// markGood records content known to match (it was hashed while written).
func (v *verifier) markGood(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.store(key, true)
}

// forget drops what is known about key.
func (v *verifier) forget(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.results, key)
	v.order = slices.DeleteFunc(v.order, func(k string) bool { return k == key })
}

// store records a result, evicting the oldest entries beyond the limit.
// v.mu must be held.
func (v *verifier) store(key string, ok bool) {
	if _, known := v.results[key]; !known {
		v.order = append(v.order, key)
	}
	v.results[key] = ok
	for len(v.order) > v.limit {
		delete(v.results, v.order[0])
		v.order = v.order[1:]
	}
}
