package slotinstall

import (
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/grubenv"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// nextBoot returns the entry systemd-boot boots next: it reads the *.conf
// entries whose linux file exists, sorts them as systemd-boot does
// (src/boot/boot.c, boot_entry_compare: no tries left last; then by
// sort-key, version descending, id descending; then more tries left and
// fewer done first) and boots the first that loader.conf's default
// pattern matches (by id: the file name without its counter).
func (n *node) nextBoot() entryFile {
	n.t.Helper()
	var entries []entryFile
	for _, e := range n.entries() {
		if _, err := os.Stat(espPath(n.esp, strings.TrimPrefix(e.linux, "/"))); err == nil {
			entries = append(entries, e)
		}
	}
	require.NotEmpty(n.t, entries, "no bootable entry on the ESP: the node does not boot")
	sort.SliceStable(entries, func(i, j int) bool { return bootCompare(entries[i], entries[j]) < 0 })
	pattern := ""
	for _, line := range strings.Split(n.read(layout.ESPLoaderConf), "\n") {
		if v, ok := strings.CutPrefix(line, "default "); ok {
			pattern = strings.ToLower(strings.TrimSpace(v))
		}
	}
	for _, e := range entries {
		if ok, _ := path.Match(pattern, e.name.slot.EntryFile(0)); ok || pattern == "" {
			return e
		}
	}
	return entries[0]
}

func bootCompare(a, b entryFile) int {
	if c := cmpBool(a.name.bad(), b.name.bad()); c != 0 {
		return c
	}
	if c := cmpBool(a.sortKey == "", b.sortKey == ""); c != 0 {
		return c
	}
	if a.sortKey != "" {
		if c := strings.Compare(a.sortKey, b.sortKey); c != 0 {
			return c
		}
		if c := -versionCompare(a.version, b.version); c != 0 {
			return c
		}
	}
	if c := -versionCompare(a.name.slot.EntryFile(0), b.name.slot.EntryFile(0)); c != 0 {
		return c
	}
	if !a.name.counted || !b.name.counted {
		return 0
	}
	if a.name.left != b.name.left {
		return b.name.left - a.name.left
	}
	return a.name.done - b.name.done
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// versionCompare is a small strverscmp: runs of digits compare as numbers.
func versionCompare(a, b string) int {
	for a != "" && b != "" {
		ra, rb := leadingRun(a), leadingRun(b)
		a, b = a[len(ra):], b[len(rb):]
		na, ea := strconv.Atoi(ra)
		nb, eb := strconv.Atoi(rb)
		if ea == nil && eb == nil {
			if na != nb {
				return na - nb
			}
			continue
		}
		if c := strings.Compare(ra, rb); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

func leadingRun(s string) string {
	digit := unicode.IsDigit(rune(s[0]))
	for i, r := range s {
		if unicode.IsDigit(r) != digit {
			return s[:i]
		}
	}
	return s
}

// grubNextBoot returns the slot GRUB boots next under BIOS, as the
// grub.cfg of pkg/image/biosboot decides from the same entries: the slot
// its environment block prefers (the one installed last) while its entry
// is blessed or has tries left, less the tries recorded in the block for
// that entry; else the other slot while its entry does; else the
// preferred one. A slot without an entry or a kernel is never booted.
func (n *node) grubNextBoot() layout.Slot {
	n.t.Helper()
	env, err := grubenv.Parse([]byte(n.read(layout.ESPGrubEnv)))
	require.NoError(n.t, err)
	good := func(s layout.Slot) bool {
		if _, err := os.Stat(espPath(n.esp, s.KernelPath())); err != nil {
			return false
		}
		for _, e := range n.entries() {
			if e.name.slot != s {
				continue
			}
			if !e.name.counted {
				return true
			}
			tried := 0
			if env[s.GrubTriedOf()] == e.name.file {
				tried = len(env[s.GrubTried()])
			}
			return e.name.left > tried
		}
		return false
	}
	first := layout.Slot(env[layout.GrubPrefer])
	if !first.Valid() {
		first = layout.SlotA
	}
	if !good(first) && good(first.Other()) {
		return first.Other()
	}
	return first
}
