package slotinstall

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

func TestByPartLabel(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vda2"), make([]byte, 4096), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vda3"), make([]byte, 8192), 0o644))
	require.NoError(t, os.Symlink("vda2", filepath.Join(dir, layout.LabelSlotA)))
	require.NoError(t, os.Symlink("vda3", filepath.Join(dir, layout.LabelSlotB)))
	ctx := context.Background()

	dev, err := ByPartLabel(dir).OpenSlot(ctx, layout.SlotB)
	require.NoError(t, err)
	defer dev.Close()
	assert.Equal(t, filepath.Join(dir, layout.LabelSlotB), dev.Name())
	size, err := dev.Size()
	require.NoError(t, err)
	assert.Equal(t, int64(8192), size)

	_, err = dev.WriteAt([]byte("squashfs"), 100)
	require.NoError(t, err)
	require.NoError(t, dev.Sync())
	sum, err := readBackSHA256(ctx, dev, 8192)
	require.NoError(t, err)
	want := make([]byte, 8192)
	copy(want[100:], "squashfs")
	assert.Equal(t, sum, hexSHA256(want))
	got, err := os.ReadFile(filepath.Join(dir, "vda3"))
	require.NoError(t, err)
	assert.Equal(t, want, got)

	_, err = readBackSHA256(ctx, dev, 9000)
	assert.ErrorIs(t, err, ErrReadBack, "a partition shorter than what was written")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ByPartLabel(dir).OpenSlot(cancelled, layout.SlotA)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestByPartLabelRefuses(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vda2"), nil, 0o644))
	require.NoError(t, os.Symlink("vda2", filepath.Join(dir, layout.LabelSlotA)))

	_, err := ByPartLabel(dir).OpenSlot(context.Background(), layout.SlotB)
	assert.ErrorContains(t, err, "is there a partition labelled TERRA-B on the boot disk?")

	require.NoError(t, os.Symlink("vda2", filepath.Join(dir, layout.LabelSlotB)))
	_, err = ByPartLabel(dir).OpenSlot(context.Background(), layout.SlotB)
	assert.ErrorIs(t, err, ErrSameDevice)
}

// TestByPartLabelWaitsForABusySlot: a slot the registry served is let go
// a few seconds after its marker goes; an open that finds it busy tries
// again, and any other error is at once the answer.
func TestByPartLabelWaitsForABusySlot(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vda3"), make([]byte, 4096), 0o644))
	require.NoError(t, os.Symlink("vda3", filepath.Join(dir, layout.LabelSlotB)))
	tries := 0
	busy := byPartLabel{dir: dir, poll: time.Millisecond, open: func(p string, flag int) (*os.File, error) {
		if tries++; tries < 3 {
			return nil, &os.PathError{Op: "open", Path: p, Err: unix.EBUSY}
		}
		return os.OpenFile(p, flag, 0)
	}}
	dev, err := busy.OpenSlot(context.Background(), layout.SlotB)
	require.NoError(t, err)
	require.NoError(t, dev.Close())
	assert.Equal(t, 3, tries)

	tries = 0
	denied := byPartLabel{dir: dir, poll: time.Millisecond, open: func(p string, _ int) (*os.File, error) {
		tries++
		return nil, &os.PathError{Op: "open", Path: p, Err: unix.EACCES}
	}}
	_, err = denied.OpenSlot(context.Background(), layout.SlotB)
	require.ErrorIs(t, err, unix.EACCES)
	assert.Equal(t, 1, tries)
}
