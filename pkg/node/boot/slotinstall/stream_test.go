package slotinstall

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/images/upgradeshare"
)

// beginStage begins staging build b from a stream, its writes made
// through w.
func (n *node) beginStage(b build, w ops) (*Stream, Result, error) {
	n.builds[b.version] = b
	o := n.options(b.verified(n.t))
	o.Stage = true
	if n.devices != nil {
		o.Devices = n.devices
	}
	return begin(context.Background(), o, w)
}

// writeIn writes data to w in chunks of odd sizes, as a copy does.
func writeIn(t *testing.T, w io.Writer, data []byte) {
	t.Helper()
	for len(data) > 0 {
		k := min(len(data), 3001)
		n, err := w.Write(data[:k])
		require.NoError(t, err)
		require.Equal(t, k, n)
		data = data[k:]
	}
}

func TestStreamStagesTheSlot(t *testing.T) {
	v1, v2 := newBuild("0.1.0"), newBuild("0.2.0")
	n := image(t, v1).withSlotB(3)
	require.NotEmpty(t, n.entriesOf(layout.SlotB))

	s, begun, err := n.beginStage(v2, ops{})
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, begun.Changed)
	assert.Equal(t, "rootfs.squashfs", s.Part())
	assert.Empty(t, n.entriesOf(layout.SlotB), "the target is unbootable while it is written")
	writeIn(t, s, v2.rootfs)
	res, err := s.Finish(context.Background(), bytes.NewReader(v2.rootfs))
	require.NoError(t, err)

	assert.True(t, res.Staged)
	assert.True(t, res.Changed)
	assert.Equal(t, "loader/entries/terrarium-b+3.conf.staged", res.Entry)
	assert.True(t, n.slotHolds(layout.SlotB, v2), "slot b holds 0.2.0 whole")
	assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file, "the running slot still boots next")
	lines := n.reports.all()
	assert.Contains(t, lines, "upgrade writing: rootfs written; reading it back beside its other copy")
	assert.Equal(t, "upgrade staged: 0.2.0 in slot b, which boots once armed, in "+res.Took.String(), lines[len(lines)-1])

	t.Run("the rollout's stage then writes nothing", func(t *testing.T) {
		before := n.snapshot()
		again, err := n.stage(v2)
		require.NoError(t, err)
		assert.True(t, again.Staged)
		assert.Equal(t, res.Entry, again.Entry)
		assert.Equal(t, before, n.snapshot())
	})
	t.Run("and a second stream begins nothing", func(t *testing.T) {
		before := n.snapshot()
		_, res, err := n.beginStage(v2, ops{})
		require.ErrorIs(t, err, upgrade.ErrAlreadyInstalled)
		assert.False(t, res.Changed)
		assert.Equal(t, before, n.snapshot())
	})
}

// TestStreamRefusesWhatIsNotTheOtherCopy: whatever differs between the
// slot and the other copy, or any byte short or over, leaves the target
// unbootable, the running slot booting as before.
func TestStreamRefusesWhatIsNotTheOtherCopy(t *testing.T) {
	v2 := newBuild("0.2.0")
	flipped := bytes.Clone(v2.rootfs)
	flipped[12345] ^= 1
	for _, tc := range []struct {
		name          string
		written, twin []byte
		wantErr       error
		wantMsg       string
	}{
		{"the other copy differs", v2.rootfs, flipped, ErrCopiesDiffer, "differs from the other copy at byte 12345"},
		{"the other copy is short", v2.rootfs, v2.rootfs[:15000], ErrCopiesDiffer, "the other copy ends at byte 15000"},
		{"the other copy is long", v2.rootfs, append(bytes.Clone(v2.rootfs), 0), ErrCopiesDiffer, "the other copy has more than its 20000 bytes"},
		{"the stream is short", v2.rootfs[:19999], v2.rootfs, upgrade.ErrTruncated, "19999 of its 20000 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := image(t, newBuild("0.1.0")).withSlotB(3)
			s, _, err := n.beginStage(v2, ops{})
			require.NoError(t, err)
			defer s.Close()
			writeIn(t, s, tc.written)
			res, err := s.Finish(context.Background(), bytes.NewReader(tc.twin))
			require.ErrorIs(t, err, tc.wantErr)
			assert.ErrorContains(t, err, tc.wantMsg)
			assert.True(t, res.Changed)
			assert.False(t, res.Staged)
			assert.Empty(t, n.entriesOf(layout.SlotB))
			assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)
		})
	}

	t.Run("a stream longer than the rootfs", func(t *testing.T) {
		n := image(t, newBuild("0.1.0")).withSlotB(3)
		s, _, err := n.beginStage(v2, ops{})
		require.NoError(t, err)
		defer s.Close()
		writeIn(t, s, v2.rootfs)
		_, err = s.Write([]byte{0})
		require.ErrorContains(t, err, "more than its 20000 bytes")
		_, err = s.Finish(context.Background(), bytes.NewReader(v2.rootfs))
		require.ErrorContains(t, err, "more than its 20000 bytes")
		assert.Empty(t, n.entriesOf(layout.SlotB))
	})
}

// entriesOf are slot's entries on the ESP, staged ones too.
func (n *node) entriesOf(slot layout.Slot) []string {
	n.t.Helper()
	st, err := readESP(n.esp, n.running, func(string) (int64, error) { return 1 << 30, nil })
	require.NoError(n.t, err)
	var out []string
	for _, e := range st.staged {
		out = append(out, e.name.file)
	}
	for _, e := range n.entries() {
		if e.name.slot == slot {
			out = append(out, e.name.file)
		}
	}
	return out
}

// TestStreamAlongAShare: a share's Add tees the rootfs into the stream
// from its reads, and the share's copy, read back, checks the slot.
func TestStreamAlongAShare(t *testing.T) {
	v2 := newBuild("0.2.0")
	n := image(t, newBuild("0.1.0")).withSlotB(3)
	share, err := upgradeshare.Open(t.TempDir())
	require.NoError(t, err)
	var s *Stream
	a, err := share.Add(t.Context(), v2.verified(t), upgradeshare.Tee{Part: "rootfs.squashfs", Open: func() io.Writer {
		s, _, err = n.beginStage(v2, ops{})
		require.NoError(t, err)
		return s
	}})
	require.NoError(t, err)
	require.NotNil(t, s)
	defer s.Close()
	twin, err := share.ReadBack(a, "rootfs.squashfs")
	require.NoError(t, err)
	defer twin.Close()
	res, err := s.Finish(t.Context(), twin)
	require.NoError(t, err)
	assert.True(t, res.Staged)
	assert.True(t, n.slotHolds(layout.SlotB, v2))
	assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)
}

// TestStreamReadsTheSlotBack: a slot disk that returns other bytes than
// were written is caught by the comparison, whatever the stream was.
func TestStreamReadsTheSlotBack(t *testing.T) {
	v2 := newBuild("0.2.0")
	n := image(t, newBuild("0.1.0")).withSlotB(3)
	n.devices = badDisks{ByPartLabel(n.devDir)}
	s, _, err := n.beginStage(v2, ops{})
	require.NoError(t, err)
	defer s.Close()
	writeIn(t, s, v2.rootfs)
	_, err = s.Finish(context.Background(), bytes.NewReader(v2.rootfs))
	require.ErrorIs(t, err, ErrCopiesDiffer)
	assert.ErrorContains(t, err, "differs from the other copy at byte 100")
	assert.Empty(t, n.entriesOf(layout.SlotB))
	assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)
}

// TestBeginSaysWhatItChanged: a Begin that fails after the target's
// entries began to go says so, as Install's Result does.
func TestBeginSaysWhatItChanged(t *testing.T) {
	v2 := newBuild("0.2.0")
	n := image(t, newBuild("0.1.0")).withSlotB(3)
	cutGrubEnv := func(op string) error {
		if strings.HasPrefix(op, "write "+layout.ESPGrubEnv) {
			return errors.New("the ESP went away")
		}
		return nil
	}
	s, res, err := n.beginStage(v2, ops{cut: cutGrubEnv})
	require.ErrorContains(t, err, "the ESP went away")
	assert.Nil(t, s)
	assert.True(t, res.Changed, "slot b's entries are gone")
	assert.Empty(t, n.entriesOf(layout.SlotB))

	t.Run("and one refused before it changes nothing", func(t *testing.T) {
		n := image(t, newBuild("0.1.0")).withSlotB(3)
		before := n.snapshot()
		_, res, err := n.beginStage(newBuild("0.1.0"), ops{})
		require.ErrorIs(t, err, upgrade.ErrAlreadyInstalled, "the running version")
		assert.False(t, res.Changed)
		assert.Equal(t, before, n.snapshot())
	})
}
