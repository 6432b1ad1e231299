package bootloader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

func touch(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("title Terrarium\n"), 0o644))
}

func TestCountedEntry(t *testing.T) {
	esp := t.TempDir()
	entries := filepath.Join(esp, layout.ESPEntriesDir)
	touch(t, filepath.Join(entries, "terrarium-a+2-1.conf"))
	touch(t, filepath.Join(entries, "terrarium-b.conf"))
	touch(t, filepath.Join(entries, "other+3.conf"))

	got, err := countedEntry(esp, layout.SlotA)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(entries, "terrarium-a+2-1.conf"), got)
	assert.Equal(t, "terrarium-a+2-1", entryName(got))
	// A blessed entry has no counter.
	got, err = countedEntry(esp, layout.SlotB)
	require.NoError(t, err)
	assert.Empty(t, got, "countedEntry(b)")
	// A fresh entry as imagebuild writes it.
	touch(t, filepath.Join(entries, layout.SlotB.EntryFile(3)))
	got, err = countedEntry(esp, layout.SlotB)
	require.NoError(t, err)
	assert.Equal(t, "terrarium-b+3.conf", filepath.Base(got))
	// Exhausted tries are still counted (the entry is on trial, and bad).
	touch(t, filepath.Join(entries, "terrarium-a+0-3.conf"))
	require.NoError(t, os.Remove(filepath.Join(entries, "terrarium-a+2-1.conf")))
	got, err = countedEntry(esp, layout.SlotA)
	require.NoError(t, err)
	assert.Equal(t, "terrarium-a+0-3.conf", filepath.Base(got))
}

func TestCountedEntryNoEntries(t *testing.T) {
	// No loader/entries directory at all.
	got, err := countedEntry(t.TempDir(), layout.SlotA)
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestCountedEntryIgnoresSimilarNames(t *testing.T) {
	esp := t.TempDir()
	entries := filepath.Join(esp, layout.ESPEntriesDir)
	touch(t, filepath.Join(entries, "terrarium-a.conf"))
	touch(t, filepath.Join(entries, "terrarium-ab+2.conf"))
	touch(t, filepath.Join(entries, "terrarium-a+2.conf.bak"))
	touch(t, filepath.Join(entries, "xterrarium-a+2.conf"))
	got, err := countedEntry(esp, layout.SlotA)
	require.NoError(t, err)
	assert.Empty(t, got)
}

// After a failed boot of a slot, a reboot helps only when the boot loader
// then boots something that has not spent its tries.
func TestRebootHelps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []string
		slot    layout.Slot
		want    bool
	}{
		{"trial with tries left", []string{"terrarium-b+1-1.conf", "terrarium-a.conf"}, layout.SlotB, true},
		{"a fresh image's first boot", []string{"terrarium-a+2-1.conf"}, layout.SlotA, true},
		{"last try, the other slot blessed", []string{"terrarium-b+0-2.conf", "terrarium-a.conf"}, layout.SlotB, true},
		{"last try, the other slot on trial with tries left", []string{"terrarium-b+0-3.conf", "terrarium-a+1-2.conf"}, layout.SlotB, true},
		{"last try of the only slot", []string{"terrarium-a+0-3.conf"}, layout.SlotA, false},
		{"last try, the other slot spent too", []string{"terrarium-a+0-3.conf", "terrarium-b+0-3.conf"}, layout.SlotA, false},
		{"a blessed slot", []string{"terrarium-a.conf", "terrarium-b.conf"}, layout.SlotA, false},
		{"a blessed slot, the other on trial", []string{"terrarium-a.conf", "terrarium-b+3.conf"}, layout.SlotA, false},
		{"foreign entries only", []string{"other+3.conf", "terrarium-a+x.conf", "terrarium-ab+2.conf", "xterrarium-a+2.conf"}, layout.SlotA, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, rebootHelps(entriesNamed(t, tc.entries), tc.slot))
		})
	}
}

// An upgrade's trial boot is one on trial whose fallback is blessed.
func TestTrialOverBlessed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []string
		slot    layout.Slot
		want    bool
	}{
		{"an upgrade's trial", []string{"terrarium-b+0-1.conf", "terrarium-a.conf"}, layout.SlotB, true},
		{"an upgrade's trial, back to a", []string{"terrarium-a+2.conf", "terrarium-b.conf"}, layout.SlotA, true},
		{"a fresh image's first boot", []string{"terrarium-a+2-1.conf"}, layout.SlotA, false},
		{"both on trial", []string{"terrarium-b+1-1.conf", "terrarium-a+1.conf"}, layout.SlotB, false},
		{"blessed", []string{"terrarium-b.conf", "terrarium-a.conf"}, layout.SlotB, false},
		{"the fallback boots, the trial slot counted", []string{"terrarium-b+0-1.conf", "terrarium-a.conf"}, layout.SlotA, false},
		{"foreign entries only", []string{"terrarium-ab+2.conf", "xterrarium-a.conf"}, layout.SlotB, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, trialOverBlessed(entriesNamed(t, tc.entries), tc.slot))
		})
	}
}

// entriesNamed is an entries directory holding files of these names.
func entriesNamed(t *testing.T, names []string) []os.DirEntry {
	t.Helper()
	dir := t.TempDir()
	for _, e := range names {
		touch(t, filepath.Join(dir, e))
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	return entries
}

// FuzzTriesLeft reads entry file names found on the ESP: a name it takes
// as the slot's entry is the slot's, and never has negative tries.
func FuzzTriesLeft(f *testing.F) {
	for _, s := range []string{"", "+3.conf", "+0-3.conf", "+x.conf", "+-1.conf", ".conf.conf", "+99999999999999999999.conf"} {
		f.Add(layout.SlotB.EntryID() + s)
	}
	f.Add("other.conf")
	f.Fuzz(func(t *testing.T, name string) {
		left, blessed, ok := triesLeft(name, layout.SlotB)
		if !ok {
			return
		}
		if !strings.HasPrefix(name, layout.SlotB.EntryID()) || !strings.HasSuffix(name, ".conf") {
			t.Fatalf("%q taken as slot b's entry", name)
		}
		if left < 0 || (blessed && left != 0) {
			t.Fatalf("%q: %d tries left, blessed %t", name, left, blessed)
		}
	})
}
