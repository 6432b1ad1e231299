package slotinstall

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
