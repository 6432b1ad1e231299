// Package bootloader is the boot entries' side of boot counting (Boot
// Loader Spec entries on the EFI system partition, read by systemd-boot
// under UEFI and by GRUB under BIOS): it tells whether a slot is on trial,
// blesses a boot by removing its counter, and moves the tries GRUB
// recorded in its environment block into the entries' names.
package bootloader

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"golang.org/x/sys/unix"
)

// BootLoader is the boot entries' side of boot counting.
type BootLoader interface {
	// OnTrial reports whether slot's entry still carries a boot counter.
	OnTrial(ctx context.Context, slot layout.Slot) (bool, error)
	// Bless removes the counter of slot's entry.
	Bless(ctx context.Context, slot layout.Slot) (BlessResult, error)
}

// BlessResult says what blessing found.
type BlessResult string

// Bless results.
const (
	BlessedNow     BlessResult = "blessed"
	AlreadyBlessed BlessResult = "good"
)

// ESPLoader blesses boots by renaming Boot Loader Spec entries on the
// EFI system partition, which it mounts only for the rename.
type ESPLoader struct {
	Device string // the ESP block device
	Mount  string // a private mount point
}

var _ BootLoader = (*ESPLoader)(nil)

// WithESP mounts the ESP (read-only unless write) for fn, which gets the
// mount point, then syncs and unmounts it.
func (l *ESPLoader) WithESP(write bool, fn func(dir string) error) error {
	if err := os.MkdirAll(l.Mount, 0o700); err != nil {
		return err
	}
	flags := uintptr(unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV)
	if !write {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(l.Device, l.Mount, "vfat", flags, "umask=0077"); err != nil {
		return &os.PathError{Op: "mount ESP", Path: l.Device, Err: err}
	}
	ferr := fn(l.Mount)
	unix.Sync()
	if err := unix.Unmount(l.Mount, 0); err != nil && ferr == nil {
		ferr = &os.PathError{Op: "unmount ESP", Path: l.Mount, Err: err}
	}
	return ferr
}

// countedEntry finds slot's entry carrying a boot counter.
func countedEntry(dir string, slot layout.Slot) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, layout.ESPEntriesDir, slot.EntryID()+"+*.conf"))
	if err != nil || len(matches) == 0 {
		return "", err
	}
	return matches[0], nil
}

// OnTrial implements BootLoader.
func (l *ESPLoader) OnTrial(ctx context.Context, slot layout.Slot) (bool, error) {
	var trial bool
	err := l.WithESP(false, func(dir string) error {
		e, err := countedEntry(dir, slot)
		trial = e != ""
		return err
	})
	return trial, err
}

// Bless implements BootLoader.
func (l *ESPLoader) Bless(ctx context.Context, slot layout.Slot) (BlessResult, error) {
	res := AlreadyBlessed
	err := l.WithESP(true, func(dir string) error {
		e, err := countedEntry(dir, slot)
		if err != nil || e == "" {
			if _, serr := os.Stat(filepath.Join(dir, layout.ESPEntriesDir, slot.EntryFile(0))); serr != nil {
				return fmt.Errorf("no boot entry for slot %s on the ESP", slot)
			}
			return err
		}
		if err := os.Rename(e, filepath.Join(filepath.Dir(e), slot.EntryFile(0))); err != nil {
			return err
		}
		res = BlessedNow
		return nil
	})
	return res, err
}

// entryName strips the directory from an entry path, for messages.
func entryName(p string) string { return strings.TrimSuffix(filepath.Base(p), ".conf") }

// LiveBoot is what Live's Bless finds.
const LiveBoot BlessResult = "live from the ISO (nothing to bless)"

// Live is the boot loader of a live boot from the ISO: its one entry is
// never counted and the medium is read-only, so no boot is on trial and
// there is nothing to bless.
type Live struct{}

var _ BootLoader = Live{}

// OnTrial implements BootLoader: a live boot is never on trial.
func (Live) OnTrial(context.Context, layout.Slot) (bool, error) { return false, nil }

// Bless implements BootLoader: it changes nothing.
func (Live) Bless(context.Context, layout.Slot) (BlessResult, error) { return LiveBoot, nil }

// triesLeft reads a Boot Loader Spec entry file name of slot: blessed
// (no counter), or the tries it has left ("<id>+LEFT[-DONE].conf"). ok is
// false for a name that is not slot's entry.
func triesLeft(name string, slot layout.Slot) (left int, blessed, ok bool) {
	if name == slot.EntryFile(0) {
		return 0, true, true
	}
	left, _, ok = counter(name, slot)
	return left, false, ok
}

// RebootHelps reports whether rebooting after a failed boot of slot lets
// the boot loader count the failure and boot something that has not spent
// its tries: slot is on trial (its entry counts tries) and either still has
// tries left or the other slot's entry is blessed or has tries left. A
// blessed slot, or the last try of the only bootable one, would boot the
// same failure again.
func (l *ESPLoader) RebootHelps(ctx context.Context, slot layout.Slot) (bool, error) {
	return l.decide(slot, rebootHelps)
}

// decide mounts the ESP read-only and decides from its entries.
func (l *ESPLoader) decide(slot layout.Slot, fn func([]os.DirEntry, layout.Slot) bool) (bool, error) {
	var yes bool
	err := l.WithESP(false, func(dir string) error {
		entries, err := os.ReadDir(filepath.Join(dir, layout.ESPEntriesDir))
		if err != nil {
			return err
		}
		yes = fn(entries, slot)
		return nil
	})
	return yes, err
}

// TrialOverBlessed reports whether slot is on trial while the other slot's
// entry is blessed: an upgrade's trial boot, whose fallback is a slot that
// has run well. (A fresh image's first boot is on trial over nothing.)
func (l *ESPLoader) TrialOverBlessed(ctx context.Context, slot layout.Slot) (bool, error) {
	return l.decide(slot, trialOverBlessed)
}

// trialOverBlessed decides TrialOverBlessed from the ESP's entries.
func trialOverBlessed(entries []os.DirEntry, slot layout.Slot) bool {
	trial, otherBlessed := false, false
	for _, e := range entries {
		if _, blessed, ok := triesLeft(e.Name(), slot); ok {
			trial = !blessed
		}
		if _, blessed, ok := triesLeft(e.Name(), slot.Other()); ok {
			otherBlessed = blessed
		}
	}
	return trial && otherBlessed
}

// rebootHelps decides RebootHelps from the ESP's entries.
func rebootHelps(entries []os.DirEntry, slot layout.Slot) bool {
	trial, own, otherBootable := false, false, false
	for _, e := range entries {
		for _, s := range []layout.Slot{layout.SlotA, layout.SlotB} {
			left, blessed, ok := triesLeft(e.Name(), s)
			switch {
			case !ok:
			case s == slot:
				trial = !blessed
				own = !blessed && left > 0
			default:
				otherBootable = otherBootable || blessed || left > 0
			}
		}
	}
	return own || trial && otherBootable
}
