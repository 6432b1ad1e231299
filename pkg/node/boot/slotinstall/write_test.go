package slotinstall

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProgressWriter(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} // a second a read
	r := &reports{}
	var out bytes.Buffer
	p := &progressWriter{w: &out, total: 1000, clock: clock, report: r, last: clock.Now()}
	for range 10 {
		n, err := p.Write(make([]byte, 100))
		require.NoError(t, err)
		require.Equal(t, 100, n)
	}
	p.done()
	p.done()
	assert.Equal(t, 1000, out.Len())
	assert.Equal(t, []string{
		"upgrade writing: rootfs 20%", "upgrade writing: rootfs 40%", "upgrade writing: rootfs 60%",
		"upgrade writing: rootfs 80%", "upgrade writing: rootfs 100%",
	}, r.all(), "every two seconds, and 100% once")
}

func TestFreeSpace(t *testing.T) {
	free, err := freeSpace(t.TempDir())
	require.NoError(t, err)
	assert.Positive(t, free)
	_, err = freeSpace("/nonexistent/esp")
	assert.ErrorContains(t, err, "statfs /nonexistent/esp")
}
