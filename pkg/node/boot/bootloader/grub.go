package bootloader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/grubenv"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// CountGrubTries moves the tries GRUB recorded in its environment block
// (a BIOS boot; docs/on-disk-contract.md#bios-boot) into the names of the
// entries they were of, as systemd-boot renames an entry before it boots
// it, and clears them from the block. After it the entries alone say how
// many tries each slot has left, whichever firmware booted. It returns a
// line per entry it renamed. An ESP without the block (a Secure Boot
// image) or with no try recorded is left as it is.
//
// A power cut between the rename and the block's write leaves tries that
// name an entry no longer there: they are dropped at the next boot, never
// counted twice.
func (l *ESPLoader) CountGrubTries(ctx context.Context) ([]string, error) {
	var pending bool
	err := l.WithESP(false, func(dir string) (err error) {
		pending, err = grubTriesPending(dir)
		return err
	})
	if err != nil || !pending {
		return nil, err
	}
	var counted []string
	err = l.WithESP(true, func(dir string) (err error) {
		counted, err = countGrubTries(dir)
		return err
	})
	return counted, err
}

// readGrubEnv reads the block of the ESP at dir; nil when it has none.
func readGrubEnv(dir string) (grubenv.Env, error) {
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	env, err := grubenv.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", layout.ESPGrubEnv, err)
	}
	return env, nil
}

// grubTriesPending reports whether the block of the ESP at dir records a
// try.
func grubTriesPending(dir string) (bool, error) {
	env, err := readGrubEnv(dir)
	for _, s := range layout.Slots() {
		if env[s.GrubTried()] != "" || env[s.GrubTriedOf()] != "" {
			return true, err
		}
	}
	return false, err
}

// countGrubTries does CountGrubTries on the ESP mounted at dir.
func countGrubTries(dir string) ([]string, error) {
	env, err := readGrubEnv(dir)
	if err != nil || env == nil {
		return nil, err
	}
	var counted []string
	entries := filepath.Join(dir, layout.ESPEntriesDir)
	for _, s := range layout.Slots() {
		tries, of := len(env[s.GrubTried()]), env[s.GrubTriedOf()]
		left, done, ok := counter(of, s)
		if tries == 0 || !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join(entries, of)); err != nil {
			continue // counted before a power cut, or replaced since
		}
		n := min(tries, left)
		if n == 0 {
			continue // no try left to count: GRUB never boots it on trial
		}
		name := fmt.Sprintf("%s+%d-%d.conf", s.EntryID(), left-n, done+n)
		if err := os.Rename(filepath.Join(entries, of), filepath.Join(entries, name)); err != nil {
			return counted, err
		}
		counted = append(counted, fmt.Sprintf("slot %s: %d %s by GRUB counted: %s is now %s", s, tries, plural(tries, "try", "tries"), of, name))
	}
	if len(counted) > 0 {
		if err := atomicfile.SyncDir(entries); err != nil {
			return counted, err
		}
	}
	_, err = grubenv.UpdateFile(filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv)), func(e grubenv.Env) {
		for _, s := range layout.Slots() {
			delete(e, s.GrubTried())
			delete(e, s.GrubTriedOf())
		}
	})
	return counted, err
}

// counter reads a counted entry file name of slot,
// "<id>+LEFT[-DONE].conf".
func counter(name string, slot layout.Slot) (left, done int, ok bool) {
	rest, found := strings.CutPrefix(name, slot.EntryID()+"+")
	if !found {
		return 0, 0, false
	}
	rest, found = strings.CutSuffix(rest, ".conf")
	if !found {
		return 0, 0, false
	}
	l, d, hasDone := strings.Cut(rest, "-")
	left, err := strconv.Atoi(l)
	if err != nil || left < 0 {
		return 0, 0, false
	}
	if hasDone {
		if done, err = strconv.Atoi(d); err != nil || done < 0 {
			return 0, 0, false
		}
	}
	return left, done, true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// PreferGrub records in GRUB's environment block, when the ESP at dir has
// one, that slot is the slot last installed, which GRUB tries first, and
// drops tries recorded of that slot's earlier entries. slotinstall calls
// it once the slot has no entry, before it writes the new one, so that
// GRUB's order follows the entries' sort keys at every step.
//
// A block that is missing or damaged beside a GRUB configuration is
// written anew, holding slot alone: without it GRUB would record no try
// and boot its default slot whatever was installed. An ESP without a GRUB
// configuration (a Secure Boot image) is left as it is.
func PreferGrub(dir string, slot layout.Slot) error {
	envPath := filepath.Join(dir, filepath.FromSlash(layout.ESPGrubEnv))
	_, err := grubenv.UpdateFile(envPath, func(e grubenv.Env) {
		e[layout.GrubPrefer] = string(slot)
		delete(e, slot.GrubTried())
		delete(e, slot.GrubTriedOf())
	})
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, grubenv.ErrNotBlock) {
		return err
	}
	if _, serr := os.Stat(filepath.Join(dir, filepath.FromSlash(layout.ESPGrubConfig))); serr != nil {
		if errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		return serr
	}
	b, err := grubenv.Encode(grubenv.Env{layout.GrubPrefer: string(slot)})
	if err != nil {
		return err
	}
	// FAT renames over a file are not atomic: the damaged block goes
	// first; until the new one is in place GRUB finds none and boots
	// nothing on trial (terrarium_try), which is safe.
	tmp := envPath + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := atomicfile.SyncFile(tmp); err != nil {
		return err
	}
	if err := os.Remove(envPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, envPath); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(envPath))
}
