package slotinstall

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// stage stages build b.
func (n *node) stage(b build) (Result, error) {
	n.builds[b.version] = b
	o := n.options(b.verified(n.t))
	o.Stage = true
	return Install(context.Background(), o)
}

func TestStageThenArm(t *testing.T) {
	v1, v2 := newBuild("0.1.0"), newBuild("0.2.0")
	n := image(t, v1)

	staged, err := n.stage(v2)
	require.NoError(t, err)
	assert.True(t, staged.Staged)
	assert.Equal(t, layout.SlotB, staged.Slot)
	assert.Equal(t, "loader/entries/terrarium-b+3.conf.staged", staged.Entry)
	assert.Equal(t, []string{"terrarium/b/vmlinuz", "terrarium/b/initrd.img", "loader/entries/terrarium-b+3.conf.staged"}, staged.Files)
	assert.True(t, n.slotHolds(layout.SlotB, v2), "slot b holds 0.2.0 whole")
	assert.Empty(t, n.leftovers())
	assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file, "the running slot still boots next, under UEFI and BIOS")
	lines := n.reports.all()
	assert.Equal(t, "upgrade staged: 0.2.0 in slot b, which boots once armed, in "+staged.Took.String(), lines[len(lines)-1])

	for name, policy := range map[string]upgrade.Policy{"refuse": upgrade.Refuse, "force (a forced rollout's turn)": upgrade.Force} {
		t.Run("staging it again writes nothing, "+name, func(t *testing.T) {
			before := n.snapshot()
			o := n.options(v2.verified(t))
			o.Stage, o.Policy = true, policy
			again, err := Install(context.Background(), o)
			require.NoError(t, err)
			assert.True(t, again.Staged)
			assert.Equal(t, staged.Entry, again.Entry)
			assert.Equal(t, before, n.snapshot())
		})
	}

	armed, err := Arm(context.Background(), n.esps, staged, n.reports)
	require.NoError(t, err)
	assert.False(t, armed.Staged)
	assert.Equal(t, "loader/entries/terrarium-b+3.conf", armed.Entry)
	assert.Equal(t, []string{"terrarium/b/vmlinuz", "terrarium/b/initrd.img", "loader/entries/terrarium-b+3.conf"}, armed.Files)
	assert.Equal(t, "terrarium-0-999999999", armed.SortKey)
	assert.Equal(t, "terrarium-b+3.conf", n.requireBootable().name.file, "the new slot boots next")
	assert.NoFileExists(t, espPath(n.esp, staged.Entry))
	lines = n.reports.all()
	assert.Equal(t, "upgrade installed: 0.2.0 in slot b, tried at the next boot (3 tries)", lines[len(lines)-1])

	t.Run("falls back when every try fails", func(t *testing.T) {
		n.failTrial(layout.SlotB)
		assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)
	})
}

// TestInstallArmsStaged: Install of an upgrade Stage wrote commits it
// without writing the slot again.
func TestInstallArmsStaged(t *testing.T) {
	n := image(t, newBuild("0.1.0"))
	v2 := newBuild("0.2.0")
	_, err := n.stage(v2)
	require.NoError(t, err)
	dev, err := os.Stat(espPath(n.esp, layout.SlotB.KernelPath()))
	require.NoError(t, err)
	reported := len(n.reports.all())

	res, err := n.install(v2)
	require.NoError(t, err)
	assert.False(t, res.Staged)
	assert.Equal(t, "loader/entries/terrarium-b+3.conf", res.Entry)
	assert.Equal(t, "terrarium-b+3.conf", n.requireBootable().name.file)
	assert.NotContains(t, n.reports.all()[reported:], "upgrade writing: rootfs 100%", "the slot is not written again")
	again, err := os.Stat(espPath(n.esp, layout.SlotB.KernelPath()))
	require.NoError(t, err)
	assert.Equal(t, dev.ModTime(), again.ModTime(), "the kernel is not written again")
}

func TestArmRefuses(t *testing.T) {
	v2, v3 := newBuild("0.2.0"), newBuild("0.2.1")
	tests := []struct {
		name   string
		change func(n *node, staged *Result)
		want   error
	}{
		{name: "another install replaced it", want: ErrNotStaged, change: func(n *node, _ *Result) {
			_, err := n.install(v3)
			require.NoError(n.t, err)
		}},
		{name: "another upgrade staged over it", want: ErrNotStaged, change: func(n *node, _ *Result) {
			_, err := n.stage(v3)
			require.NoError(n.t, err)
		}},
		{name: "its entry removed", want: ErrNotStaged, change: func(n *node, staged *Result) {
			require.NoError(n.t, os.Remove(espPath(n.esp, staged.Entry)))
		}},
		{name: "the running slot on trial", want: ErrRunningOnTrial, change: func(n *node, _ *Result) {
			n.rename("loader/entries/terrarium-a.conf", "loader/entries/terrarium-a+3.conf")
		}},
		{name: "not a staged result", change: func(_ *node, staged *Result) { staged.Staged = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := image(t, newBuild("0.1.0"))
			n.builds[v3.version] = v3
			staged, err := n.stage(v2)
			require.NoError(t, err)
			tt.change(n, &staged)
			before := n.snapshot()
			_, err = Arm(context.Background(), n.esps, staged, n.reports)
			require.Error(t, err)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
			}
			assert.Equal(t, before, n.snapshot(), "nothing written")
		})
	}
}

// TestPowerCutStageArm cuts the power before each write of Stage and then
// Arm in turn: the node boots its running slot until the commit, and the
// new one, complete, after it; Stage and Arm run again complete the
// upgrade.
func TestPowerCutStageArm(t *testing.T) {
	v1, v2 := newBuild("0.1.0"), newBuild("0.2.0")
	stageArm := func(n *node, v *upgrade.Verified, w ops) (Result, error) {
		o := n.options(v)
		o.Stage = true
		staged, err := install(context.Background(), o, w)
		if err != nil {
			return staged, err
		}
		return arm(context.Background(), n.esps, staged, n.reports, w)
	}
	all := &powerCut{at: 1 << 30}
	n := image(t, v1)
	n.builds[v2.version] = v2
	_, err := stageArm(n, v2.verified(t), ops{cut: all.cut})
	require.NoError(t, err)
	require.Greater(t, len(all.done), 10)
	commit := len(all.done) - 2 // Arm's rename, then its sync
	require.Contains(t, all.done[commit], "rename ")
	require.Contains(t, all.done[commit], stagedSuffix)

	for at := range all.done {
		t.Run(fmt.Sprintf("before %d %s", at, opName(all.done[at])), func(t *testing.T) {
			n := image(t, v1)
			n.builds[v2.version] = v2
			v := v2.verified(t)
			_, err := stageArm(n, v, ops{cut: (&powerCut{at: at}).cut})
			require.ErrorIs(t, err, errPowerCut)

			next := n.requireBootable()
			if at <= commit {
				assert.Equal(t, "terrarium-a.conf", next.name.file, "the running slot boots until the commit")
			} else {
				assert.Equal(t, "terrarium-b+3.conf", next.name.file, "the new slot boots after the commit")
			}

			res, err := stageArm(n, v, ops{})
			if at > commit {
				require.ErrorIs(t, err, upgrade.ErrAlreadyInstalled)
			} else {
				require.NoError(t, err)
				assert.Equal(t, "loader/entries/terrarium-b+3.conf", res.Entry)
			}
			assert.Equal(t, "terrarium-b+3.conf", n.requireBootable().name.file)
			assert.True(t, n.slotHolds(layout.SlotB, v2))
			assert.Empty(t, n.leftovers())
			assert.Len(t, n.entries(), 2, "one entry per slot")
		})
	}
}
