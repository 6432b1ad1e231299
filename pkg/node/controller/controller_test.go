package controller

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counter counts its looks; block, while not nil, holds each look until
// it is closed or the context ends.
type counter struct {
	name  string
	looks atomic.Int32
	block chan struct{}
	err   error
	panic bool
}

func (c *counter) Name() string { return c.name }

func (c *counter) Reconcile(ctx context.Context) error {
	c.looks.Add(1)
	if c.block != nil {
		select {
		case <-c.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if c.panic {
		panic("a bug in " + c.name)
	}
	return c.err
}

// syncBuffer is a log sink safe for the controllers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, cs ...Scheduled) (*syncBuffer, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Run(ctx, slog.New(slog.NewTextHandler(logs, nil)), cs...)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return logs, cancel, done
}

func TestSlowControllerHoldsUpNoOther(t *testing.T) {
	slow := &counter{name: "rollout", block: make(chan struct{})}
	others := []*counter{{name: "support-stick"}, {name: "snapshots"}, {name: "config-change"}}
	cs := []Scheduled{{Controller: slow, Every: time.Millisecond}}
	for _, o := range others {
		cs = append(cs, Scheduled{Controller: o, Every: time.Millisecond})
	}
	start(t, cs...)

	require.Eventually(t, func() bool { return slow.looks.Load() == 1 }, 10*time.Second, time.Millisecond, "the slow controller never started its look")
	// While its first look is held, every other controller goes on.
	for _, o := range others {
		require.Eventually(t, func() bool { return o.looks.Load() >= 5 }, 10*time.Second, time.Millisecond, "%s did not run while rollout was held", o.name)
	}
	assert.EqualValues(t, 1, slow.looks.Load(), "the held controller looked again before its look ended")

	close(slow.block)
	require.Eventually(t, func() bool { return slow.looks.Load() >= 3 }, 10*time.Second, time.Millisecond, "the released controller did not go on")
}

func TestPanicStopsOnlyItsLook(t *testing.T) {
	buggy := &counter{name: "backup-stick", panic: true}
	fine := &counter{name: "support-stick"}
	logs, _, _ := start(t, Scheduled{Controller: buggy, Every: time.Millisecond}, Scheduled{Controller: fine, Every: time.Millisecond})

	require.Eventually(t, func() bool { return buggy.looks.Load() >= 3 && fine.looks.Load() >= 3 }, 10*time.Second, time.Millisecond)
	out := logs.String()
	assert.Contains(t, out, "controller=backup-stick")
	assert.Contains(t, out, "a bug in backup-stick", "the panic is logged")
	assert.Contains(t, out, "controller_test.go", "with its stack")
}

func TestAnErrorIsLoggedOnceWhileItLasts(t *testing.T) {
	failing := &counter{name: "snapshots", err: errors.New("etcd does not answer")}
	logs, cancel, done := start(t, Scheduled{Controller: failing, Every: time.Millisecond})

	require.Eventually(t, func() bool { return failing.looks.Load() >= 10 }, 10*time.Second, time.Millisecond)
	cancel()
	<-done
	assert.Equal(t, 1, bytes.Count([]byte(logs.String()), []byte("etcd does not answer")), "logs:\n%s", logs.String())
}

func TestRunEndsWithItsContext(t *testing.T) {
	held := &counter{name: "rollout", block: make(chan struct{})}
	_, cancel, done := start(t, Scheduled{Controller: held, Every: time.Millisecond}, Scheduled{Controller: &counter{name: "idle"}, Every: time.Hour})
	require.Eventually(t, func() bool { return held.looks.Load() == 1 }, 10*time.Second, time.Millisecond)

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
