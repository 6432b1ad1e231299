package media

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oneSlot is a machine with one USB port: Find returns what is in it.
type oneSlot struct {
	in *Medium
}

func (s *oneSlot) Find(labels ...string) (Medium, bool) {
	if s.in == nil {
		return Medium{}, false
	}
	for _, l := range labels {
		if l == s.in.Label {
			return *s.in, true
		}
	}
	return Medium{}, false
}

func (s *oneSlot) Use(context.Context, Medium, bool, func(string) error) error { return nil }

// A stick pulled and another put in under the same device name between
// two looks is a new insertion; the same stick left in is not.
func TestInsertions(t *testing.T) {
	port := &oneSlot{}
	var w Insertions
	_, ok := w.Next(port, "TERRA-UPGRA")
	assert.False(t, ok, "nothing inserted")

	port.in = &Medium{Device: "/dev/sdb1", Label: "TERRA-UPGRA", Insertion: "/dev/sdb1#1"}
	m, ok := w.Next(port, "TERRA-SUPPO", "TERRA-UPGRA")
	require.True(t, ok)
	assert.Equal(t, "/dev/sdb1", m.Device)
	_, ok = w.Next(port, "TERRA-UPGRA")
	assert.False(t, ok, "the same stick, still inserted")

	port.in = &Medium{Device: "/dev/sdb1", Label: "TERRA-UPGRA", Insertion: "/dev/sdb1#2"} // swapped between looks
	_, ok = w.Next(port, "TERRA-UPGRA")
	assert.True(t, ok, "another stick under the same device name")

	port.in = nil
	_, ok = w.Next(port, "TERRA-UPGRA")
	assert.False(t, ok, "pulled")
	port.in = &Medium{Device: "/dev/sdb1", Label: "TERRA-UPGRA", Insertion: "/dev/sdb1#2"}
	_, ok = w.Next(port, "TERRA-UPGRA")
	assert.True(t, ok, "put back: served again, even where the kernel gives no new sequence number")
	_, ok = w.Next(port, "TERRA-BACKU")
	assert.False(t, ok, "a label not asked for")
}
