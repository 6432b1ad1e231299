package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedBody is content whose reads wait until the gate opens: hashing it
// takes as long as the test wants. It offers only Read, Seek and Close (no
// WriteTo that would let a copy pass the gate).
type gatedBody struct {
	r      *bytes.Reader
	gate   <-chan struct{}
	closed atomic.Bool
}

func (g *gatedBody) Read(p []byte) (int, error) {
	<-g.gate
	return g.r.Read(p)
}

func (g *gatedBody) Seek(off int64, whence int) (int64, error) { return g.r.Seek(off, whence) }

func (g *gatedBody) Close() error {
	g.closed.Store(true)
	return nil
}

func gatedContent(data []byte, gate <-chan struct{}) (*Content, *gatedBody) {
	b := &gatedBody{r: bytes.NewReader(data), gate: gate}
	return &Content{Body: b, Size: int64(len(data)), Path: "gated"}, b
}

func sha256Of(data []byte) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(data))}
}

// A client that gives up while its content is being hashed (a peer's
// response-header timeout) does not cancel the hashing: the retry finds
// the outcome remembered and is served at once.
func TestVerifyOutlivesAClientThatGaveUp(t *testing.T) {
	var stats counters
	v := newVerifier(8, &stats)
	data := bytes.Repeat([]byte("upgrade"), 1<<12)
	want := sha256Of(data)
	gate := make(chan struct{})

	first, firstBody := gatedContent(data, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	hashed, err := v.verify(ctx, "store0@"+want.String(), first, want, true)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, hashed, "the first request starts the hashing")
	assert.False(t, firstBody.closed.Load(), "the hashing still reads the content the client left")

	close(gate) // the hashing can finish now
	require.Eventually(t, firstBody.closed.Load, 5*time.Second, time.Millisecond,
		"the hashing closes the content its client left once it is done")

	retry, retryBody := gatedContent(data, gate)
	hashed, err = v.verify(context.Background(), "store0@"+want.String(), retry, want, true)
	require.NoError(t, err)
	assert.False(t, hashed, "the retry finds the outcome remembered")
	assert.False(t, retryBody.closed.Load(), "served content stays open for the caller")
	assert.Equal(t, int64(1), stats.snapshot().Verifications)
}

// A mismatch found after its client gave up is remembered too.
func TestVerifyRemembersAMismatchFoundAfterTheClientLeft(t *testing.T) {
	var stats counters
	v := newVerifier(8, &stats)
	data := []byte("what the digest promised")
	want := sha256Of(data)
	gate := make(chan struct{})
	key := "store0@" + want.String()

	c, body := gatedContent([]byte("what the disk holds now!"), gate)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := v.verify(ctx, key, c, want, true)
	require.ErrorIs(t, err, context.Canceled)
	close(gate)
	require.Eventually(t, body.closed.Load, 5*time.Second, time.Millisecond)

	again, againBody := gatedContent(data, gate)
	hashed, err := v.verify(context.Background(), key, again, want, true)
	require.ErrorIs(t, err, ErrDigestMismatch)
	assert.False(t, hashed)
	assert.True(t, againBody.closed.Load(), "verify closes content it refuses")
	assert.Equal(t, Stats{Verifications: 1, VerifiedBytes: int64(len(data)), Mismatches: 1}, stats.snapshot())
}

// Requests that arrive while another hashes the same content wait for it
// and share its outcome; a waiter that gives up loses nothing.
func TestVerifyWaitersShareOneHash(t *testing.T) {
	var stats counters
	v := newVerifier(8, &stats)
	data := bytes.Repeat([]byte{7}, 4096)
	want := sha256Of(data)
	key := "store0@" + want.String()
	gate := make(chan struct{})

	leader, _ := gatedContent(data, gate)
	leaderDone := make(chan error, 1)
	go func() {
		_, err := v.verify(context.Background(), key, leader, want, true)
		leaderDone <- err
	}()
	require.Eventually(t, func() bool { return stats.snapshot().Verifications == 1 }, 5*time.Second, time.Millisecond)

	impatient, impatientBody := gatedContent(data, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := v.verify(ctx, key, impatient, want, true)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, impatientBody.closed.Load())

	close(gate)
	require.NoError(t, <-leaderDone)
	waiter, _ := gatedContent(data, gate)
	hashed, err := v.verify(context.Background(), key, waiter, want, true)
	require.NoError(t, err)
	assert.False(t, hashed)
	assert.Equal(t, int64(1), stats.snapshot().Verifications)
}
