package controller

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A change that finds another under way says so and waits for it to end.
func TestChangeLockSaysWhenItWaits(t *testing.T) {
	var mu sync.Mutex
	var said []string
	l := &ChangeLock{Say: func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, fmt.Sprintf(format, args...))
	}}
	l.Hold("the upgrade stick")
	assert.False(t, l.TryLock(), "held")
	got := make(chan struct{})
	go func() {
		l.Hold("the config change")
		close(got)
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(said) == 1 }, 5*time.Second, time.Millisecond)
	select {
	case <-got:
		t.Fatal("held twice")
	case <-time.After(20 * time.Millisecond):
	}
	l.Unlock()
	<-got
	l.Unlock()
	assert.Equal(t, []string{"the config change waits until the change of the node under way (an upgrade, a rollout's turn or a config change) ends"}, said,
		"the first holder waited for nothing and said nothing")
	assert.True(t, l.TryLock())
}
