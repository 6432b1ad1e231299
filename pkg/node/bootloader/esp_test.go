package bootloader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("title Terrarium\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCountedEntry(t *testing.T) {
	esp := t.TempDir()
	entries := filepath.Join(esp, layout.ESPEntriesDir)
	touch(t, filepath.Join(entries, "terrarium-a+2-1.conf"))
	touch(t, filepath.Join(entries, "terrarium-b.conf"))
	touch(t, filepath.Join(entries, "other+3.conf"))

	got, err := countedEntry(esp, layout.SlotA)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(entries, "terrarium-a+2-1.conf"); got != want {
		t.Errorf("countedEntry(a) = %q, want %q", got, want)
	}
	if entryName(got) != "terrarium-a+2-1" {
		t.Errorf("entryName = %q", entryName(got))
	}
	// A blessed entry has no counter.
	if got, err := countedEntry(esp, layout.SlotB); err != nil || got != "" {
		t.Errorf("countedEntry(b) = %q, %v, want none", got, err)
	}
	// A fresh entry as imagebuild writes it.
	touch(t, filepath.Join(entries, layout.SlotB.EntryFile(3)))
	if got, err := countedEntry(esp, layout.SlotB); err != nil || filepath.Base(got) != "terrarium-b+3.conf" {
		t.Errorf("countedEntry(b) = %q, %v", got, err)
	}
	// Exhausted tries are still counted (the entry is on trial, and bad).
	touch(t, filepath.Join(entries, "terrarium-a+0-3.conf"))
	os.Remove(filepath.Join(entries, "terrarium-a+2-1.conf"))
	if got, err := countedEntry(esp, layout.SlotA); err != nil || filepath.Base(got) != "terrarium-a+0-3.conf" {
		t.Errorf("countedEntry(a, exhausted) = %q, %v", got, err)
	}
}

func TestCountedEntryNoEntries(t *testing.T) {
	// No loader/entries directory at all.
	if got, err := countedEntry(t.TempDir(), layout.SlotA); err != nil || got != "" {
		t.Errorf("countedEntry(empty ESP) = %q, %v", got, err)
	}
}

func TestCountedEntryIgnoresSimilarNames(t *testing.T) {
	esp := t.TempDir()
	entries := filepath.Join(esp, layout.ESPEntriesDir)
	touch(t, filepath.Join(entries, "terrarium-a.conf"))
	touch(t, filepath.Join(entries, "terrarium-ab+2.conf"))
	touch(t, filepath.Join(entries, "terrarium-a+2.conf.bak"))
	touch(t, filepath.Join(entries, "xterrarium-a+2.conf"))
	if got, err := countedEntry(esp, layout.SlotA); err != nil || got != "" {
		t.Errorf("countedEntry = %q, %v, want none", got, err)
	}
}
