package slotinstall

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func TestInstall(t *testing.T) {
	v1, v2 := newBuild("0.1.0"), newBuild("0.2.0")
	n := image(t, v1)
	runningEntry := n.read("loader/entries/terrarium-a.conf")
	devA, err := os.ReadFile(filepath.Join(n.devDir, layout.LabelSlotA))
	require.NoError(t, err)

	res, err := n.install(v2)
	require.NoError(t, err)

	assert.Equal(t, layout.SlotB, res.Slot)
	assert.Equal(t, "0.2.0", res.Manifest.Version)
	assert.Equal(t, filepath.Join(n.devDir, layout.LabelSlotB), res.Device)
	assert.Equal(t, "loader/entries/terrarium-b+3.conf", res.Entry)
	assert.Equal(t, "terrarium-0-999999999", res.SortKey)
	assert.Equal(t, 3, res.Tries)
	assert.Equal(t, []string{"terrarium/b/vmlinuz", "terrarium/b/initrd.img", "loader/entries/terrarium-b+3.conf"}, res.Files)
	assert.Positive(t, res.Took)

	rootfsSum := fmt.Sprintf("%x", sha256.Sum256(v2.rootfs))
	assert.Equal(t, "title Terrarium 0.2.0 (slot b)\n"+
		"version 0.2.0\n"+
		"sort-key terrarium-0-999999999\n"+
		"linux /terrarium/b/vmlinuz\n"+
		"initrd /terrarium/b/initrd.img\n"+
		"options console=ttyS0 quiet terrarium.slot=b\n"+
		"# rootfs-sha256 "+rootfsSum+"\n", n.read(res.Entry))
	assert.True(t, n.slotHolds(layout.SlotB, v2), "slot b holds 0.2.0")
	assert.Empty(t, n.leftovers())

	// The running slot is untouched.
	assert.Equal(t, runningEntry, n.read("loader/entries/terrarium-a.conf"))
	assert.True(t, n.slotHolds(layout.SlotA, v1))
	gotA, err := os.ReadFile(filepath.Join(n.devDir, layout.LabelSlotA))
	require.NoError(t, err)
	assert.Equal(t, devA, gotA, "slot a's partition")

	assert.Equal(t, "terrarium-b+3.conf", n.requireBootable().name.file, "the new slot boots next")
	lines := n.reports.all()
	assert.Contains(t, lines, "upgrade checked: 0.2.0 over 0.1.0: writing slot b ("+res.Device+")")
	assert.Contains(t, lines, "upgrade writing: rootfs 100%")
	assert.Equal(t, "upgrade installed: 0.2.0 in slot b, tried at the next boot (3 tries), in "+res.Took.String(), lines[len(lines)-1])

	t.Run("falls back when every try fails", func(t *testing.T) {
		n.failTrial(layout.SlotB)
		assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)
	})
}

// TestUpgradeChain follows a node through upgrades, a failed one and a
// forced downgrade: the slot installed last boots first while it has
// tries left, and the slot it replaced boots when they run out.
func TestUpgradeChain(t *testing.T) {
	n := image(t, newBuild("0.1.0"))
	steps := []struct {
		build   string
		policy  upgrade.Policy
		fail    bool // its every try fails
		sortKey string
		running layout.Slot // after the boot that follows
	}{
		{build: "0.2.0", sortKey: "terrarium-0-999999999", running: layout.SlotB},
		{build: "0.3.0", sortKey: "terrarium-0-999999998", running: layout.SlotA},
		{build: "0.4.0", fail: true, sortKey: "terrarium-0-999999997", running: layout.SlotA},
		{build: "0.4.1", sortKey: "terrarium-0-999999997", running: layout.SlotB},
		{build: "0.3.5", policy: upgrade.Force, sortKey: "terrarium-0-999999996", running: layout.SlotA},
	}
	for _, st := range steps {
		b := newBuild(st.build)
		n.builds[b.version] = b
		o := n.options(b.verified(t))
		o.Policy = st.policy
		res, err := Install(context.Background(), o)
		require.NoError(t, err, "install %s", st.build)
		assert.Equal(t, st.sortKey, res.SortKey, "install %s", st.build)
		assert.Equal(t, n.running.Other(), n.requireBootable().name.slot, "after installing %s, the new slot boots next", st.build)
		if st.fail {
			n.failTrial(n.running.Other())
		}
		n.bootAndBless()
		require.Equal(t, st.running, n.running, "after installing %s", st.build)
		n.requireBootable()
	}
}

func TestInstallAgain(t *testing.T) {
	v2 := newBuild("0.2.0")
	tests := []struct {
		name   string
		setup  func(n *node)
		policy upgrade.Policy
		want   error // nil: installed again
	}{
		{name: "on trial", want: upgrade.ErrAlreadyInstalled},
		{name: "blessed", setup: func(n *node) { n.rename("loader/entries/terrarium-b+3.conf", "loader/entries/terrarium-b.conf") }, want: upgrade.ErrAlreadyInstalled},
		{name: "failed", setup: func(n *node) { n.failTrial(layout.SlotB) }, want: ErrFailedBefore},
		{name: "failed, forced", setup: func(n *node) { n.failTrial(layout.SlotB) }, policy: upgrade.Force},
		{name: "on trial, forced", policy: upgrade.Force},
		{name: "kernel changed", setup: func(n *node) { n.write(layout.SlotB.KernelPath(), "other") }},
		{name: "entry of another build of the version", setup: func(n *node) {
			n.write("loader/entries/terrarium-b+3.conf", buildEntry(layout.SlotB, "0.2.0", "terrarium-0-999999999"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := image(t, newBuild("0.1.0"))
			_, err := n.install(v2)
			require.NoError(t, err)
			if tt.setup != nil {
				tt.setup(n)
			}
			before := n.snapshot()
			o := n.options(v2.verified(t))
			o.Policy = tt.policy
			res, err := Install(context.Background(), o)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
				assert.Equal(t, before, n.snapshot(), "nothing written")
				assert.Equal(t, layout.SlotB, res.Slot)
				if errors.Is(tt.want, upgrade.ErrAlreadyInstalled) {
					assert.Contains(t, err.Error(), "slot b holds it")
					assert.NotEmpty(t, res.Entry)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "loader/entries/terrarium-b+3.conf", res.Entry)
			assert.Equal(t, "terrarium-b+3.conf", n.requireBootable().name.file)
		})
	}
}

func TestInstallRefuses(t *testing.T) {
	v2 := newBuild("0.2.0")
	tests := []struct {
		name    string
		setup   func(n *node, o *Options)
		want    error
		message string
	}{
		{name: "downgrade", setup: func(n *node, o *Options) { o.Installed.Version = "0.3.0" }, want: upgrade.ErrDowngrade},
		{name: "the running version", setup: func(n *node, o *Options) { o.Installed.Version = "0.2.0" }, want: upgrade.ErrAlreadyInstalled},
		{name: "another appliance", setup: func(n *node, o *Options) { o.Installed.Name = "other" }, want: upgrade.ErrIncompatible},
		{name: "running on trial", setup: func(n *node, o *Options) {
			n.rename("loader/entries/terrarium-a.conf", "loader/entries/terrarium-a+2-1.conf")
		}, want: ErrRunningOnTrial, message: "terrarium-a+2-1.conf"},
		{name: "a Secure Boot node", setup: func(n *node, o *Options) {
			n.write("loader/entries/terrarium-a.conf", "title Terrarium 0.1.0 (slot a)\nversion 0.1.0\nsort-key terrarium-1\nefi /terrarium/a/terrarium.efi\n")
		}, want: ErrNeedsSignedUKI, message: "terrarium-a.conf starts /terrarium/a/terrarium.efi"},
		{name: "no running entry", setup: func(n *node, o *Options) {
			require.NoError(t, os.Remove(espPath(n.esp, "loader/entries/terrarium-a.conf")))
		}, want: ErrNoRunningEntry},
		{name: "two running entries", setup: func(n *node, o *Options) {
			n.write("loader/entries/terrarium-a+3.conf", buildEntry(layout.SlotA, "0.1.0", "terrarium-1"))
		}, want: ErrNoRunningEntry},
		{name: "default pinned to the running slot", setup: func(n *node, o *Options) {
			n.write(layout.ESPLoaderConf, "default terrarium-a.conf\n")
		}, want: ErrBootOrder, message: `default "terrarium-a.conf" does not select slot b's entry`},
		{name: "running sort-key first of all", setup: func(n *node, o *Options) {
			n.write("loader/entries/terrarium-a.conf", buildEntry(layout.SlotA, "0.1.0", "a"))
		}, want: ErrBootOrder},
		{name: "slot too small", setup: func(n *node, o *Options) {
			require.NoError(t, os.Truncate(filepath.Join(n.devDir, layout.LabelSlotB), 1000))
		}, want: ErrSlotTooSmall, message: "TERRA-B has 1000"},
		{name: "no slot partition", setup: func(n *node, o *Options) {
			require.NoError(t, os.Remove(filepath.Join(n.devDir, layout.LabelSlotB)))
		}, message: "is there a partition labelled TERRA-B"},
		{name: "both labels one device", setup: func(n *node, o *Options) {
			p := filepath.Join(n.devDir, layout.LabelSlotB)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Symlink(layout.LabelSlotA, p))
		}, want: ErrSameDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := image(t, newBuild("0.1.0"))
			n.builds[v2.version] = v2
			o := n.options(v2.verified(t))
			tt.setup(n, &o)
			before := n.snapshot()
			res, err := Install(context.Background(), o)
			require.Error(t, err)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
			assert.Contains(t, err.Error(), tt.message)
			assert.Equal(t, before, n.snapshot(), "nothing written")
			assert.False(t, res.Changed, "a refusal says nothing changed")
		})
	}
}

func TestInstallESPFull(t *testing.T) {
	v2 := newBuild("0.2.0")
	n := image(t, newBuild("0.1.0"))
	o := n.options(v2.verified(t))
	before := n.snapshot()
	_, err := install(context.Background(), o, ops{statfs: func(string) (int64, error) { return 100 << 10, nil }})
	require.ErrorIs(t, err, ErrESPFull)
	assert.Equal(t, before, n.snapshot(), "nothing written")

	// The target's old kernel and initramfs make room.
	n.withSlotB(3)
	_, err = install(context.Background(), o, ops{statfs: func(string) (int64, error) { return 200 << 10, nil }})
	require.NoError(t, err)
}

func TestInstallOptions(t *testing.T) {
	v2 := newBuild("0.2.0")
	tests := []struct {
		name   string
		setup  func(n *node, o *Options)
		entry  string
		cmdine string
	}{
		{name: "default tries", entry: "terrarium-b+3.conf"},
		{name: "tries of the build's slot B", setup: func(n *node, o *Options) { n.withSlotB(5) }, entry: "terrarium-b+5.conf"},
		{name: "tries of a failed entry", setup: func(n *node, o *Options) {
			n.withSlotB(2)
			n.failTrial(layout.SlotB)
		}, entry: "terrarium-b+2.conf"},
		{name: "tries asked", setup: func(n *node, o *Options) { n.withSlotB(5); o.Tries = 1 }, entry: "terrarium-b+1.conf"},
		{name: "reset and rescue not carried over", setup: func(n *node, o *Options) {
			n.write("loader/entries/terrarium-a.conf", "title T\nsort-key terrarium-1\nversion 0.1.0\nlinux /terrarium/a/vmlinuz\n"+
				"options console=ttyS0 terrarium.reset-state\noptions terrarium.slot=a terrarium.rescue=1 quiet\n")
		}, entry: "terrarium-b+3.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := image(t, newBuild("0.1.0"))
			n.builds[v2.version] = v2
			o := n.options(v2.verified(t))
			if tt.setup != nil {
				tt.setup(n, &o)
			}
			res, err := Install(context.Background(), o)
			require.NoError(t, err)
			assert.Equal(t, layout.ESPEntriesDir+"/"+tt.entry, res.Entry)
			e := parseEntry([]byte(n.read(res.Entry)))
			assert.Equal(t, []string{"console=ttyS0", "quiet", "terrarium.slot=b"}, e.options)
			assert.Equal(t, tt.entry, n.requireBootable().name.file)
			assert.Len(t, n.entries(), 2, "one entry per slot")
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	n := image(t, newBuild("0.1.0"))
	good := n.options(newBuild("0.2.0").verified(t))
	tests := []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"missing", func(o *Options) { o.Upgrade, o.ESP, o.Clock = nil, nil, nil }, "options [Upgrade ESP Clock] are not set"},
		{"slot", func(o *Options) { o.Running = "c" }, `running slot "c"`},
		{"tries", func(o *Options) { o.Tries = 10 }, "tries 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.edit(&o)
			_, err := Install(context.Background(), o)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// badDisk is a slot's partition that returns other bytes than written.
type badDisk struct{ SlotDevice }

func (d badDisk) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.SlotDevice.ReadAt(p, off)
	if n > 100 {
		p[100] ^= 1
	}
	return n, err
}

type badDisks struct{ SlotDevices }

func (d badDisks) OpenSlot(ctx context.Context, slot layout.Slot) (SlotDevice, error) {
	dev, err := d.SlotDevices.OpenSlot(ctx, slot)
	return badDisk{dev}, err
}

func TestInstallReadBackFails(t *testing.T) {
	v2 := newBuild("0.2.0")
	n := image(t, newBuild("0.1.0")).withSlotB(3)
	o := n.options(v2.verified(t))
	o.Devices = badDisks{o.Devices}
	res, err := Install(context.Background(), o)
	require.ErrorIs(t, err, ErrReadBack)
	assert.True(t, res.Changed, "slot b was written")
	assert.Contains(t, err.Error(), filepath.Join(n.devDir, layout.LabelSlotB))
	assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)
	for _, e := range n.entries() {
		assert.Equal(t, layout.SlotA, e.name.slot, "slot b has no entry")
	}
}

// changingFile is an upgrade file whose bytes a test changes after Verify.
type changingFile struct{ data []byte }

func (c *changingFile) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(c.data).ReadAt(p, off)
}

func TestInstallFileChangedAfterVerify(t *testing.T) {
	v2 := newBuild("0.2.0")
	n := image(t, newBuild("0.1.0"))
	n.builds[v2.version] = v2
	file := &changingFile{data: v2.upgradeFile(t)}
	v := verify(t, file, int64(len(file.data)))
	i := bytes.Index(file.data, v2.rootfs)
	require.Positive(t, i)
	file.data[i+5000] ^= 1

	_, err := Install(context.Background(), n.options(v))
	require.ErrorIs(t, err, upgrade.ErrHashMismatch, "told from a disk that lost a write")
	assert.NotErrorIs(t, err, ErrReadBack)
	assert.ErrorContains(t, err, "holds other bytes than the manifest's ")
	assert.Equal(t, "terrarium-a.conf", n.requireBootable().name.file)

	file.data[i+5000] ^= 1
	_, err = Install(context.Background(), n.options(v))
	require.NoError(t, err)
	assert.Equal(t, "terrarium-b+3.conf", n.requireBootable().name.file)
}
