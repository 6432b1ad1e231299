package slotmount

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Mounting needs a real squashfs partition (the QEMU tests mount one);
// here, what Mount refuses before it mounts.
func TestMountRefuses(t *testing.T) {
	_, err := Mount(context.Background(), t.TempDir(), layout.Slot("c"), t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no such slot`)

	// No link for the slot's partition: it waits for udev until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Mount(ctx, t.TempDir(), layout.SlotA, t.TempDir())
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
