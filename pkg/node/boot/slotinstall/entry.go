package slotinstall

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// DefaultTries is the boot counter of a new entry when Options.Tries is 0
// and no counted entry on the ESP tells the build's (boot.tries of the
// build spec, whose default it is).
const DefaultTries = 3

// maxTries is the largest boot counter the build spec allows.
const maxTries = layout.MaxBootTries

// tempSuffix marks a file Install is writing; systemd-boot reads only
// *.conf entries, so an entry with it is never booted.
const tempSuffix = ".new"

// stagedSuffix marks the entry of a slot Stage wrote: complete, under a
// name that neither systemd-boot nor GRUB reads (they read *.conf), until
// Arm renames it to its .conf name.
const stagedSuffix = ".staged"

// Sort keys Install gives entries: sortKeyPrefix and nine digits, the
// first sortKeyFirst and each next one one less (see the package
// documentation). They all sort before the build's "terrarium-1".
const (
	sortKeyPrefix = layout.ESPEntryTokenPrefix + "0-"
	sortKeyFirst  = 999_999_999
)

// rootfsComment starts the comment line of an entry Install writes that
// records the SHA-256 of the rootfs in the slot.
const rootfsComment = "# rootfs-sha256 "

// Kernel command line keys that never pass from the running entry to the
// new one: the slot is the new one's own, and a factory reset or a rescue
// shell asked of one boot is not asked of the next slot.
var droppedCmdlineKeys = []string{layout.CmdlineSlot, layout.CmdlineResetState, layout.CmdlineRescue}

var entryNameRE = regexp.MustCompile(`^` + regexp.QuoteMeta(layout.ESPEntryTokenPrefix) + `([a-z])(?:\+([0-9]+)(?:-([0-9]+))?)?\.conf$`)

// entryName is a slot's entry file name, parsed: terrarium-b.conf
// (blessed), terrarium-b+3.conf, terrarium-b+2-1.conf (counted).
type entryName struct {
	file    string
	slot    layout.Slot
	counted bool
	left    int
	done    int
}

// parseEntryName parses a file name in loader/entries, and reports
// whether it is a slot's entry.
func parseEntryName(file string) (entryName, bool) {
	m := entryNameRE.FindStringSubmatch(strings.ToLower(file))
	if m == nil || !layout.Slot(m[1]).Valid() {
		return entryName{}, false
	}
	n := entryName{file: file, slot: layout.Slot(m[1])}
	if m[2] != "" {
		left, err := strconv.Atoi(m[2])
		if err != nil {
			return entryName{}, false
		}
		n.counted, n.left = true, left
		if m[3] != "" {
			if n.done, err = strconv.Atoi(m[3]); err != nil {
				return entryName{}, false
			}
		}
	}
	return n, true
}

// bad reports whether the entry has no tries left: systemd-boot sorts it
// last, and boots it only when nothing else is left.
func (n entryName) bad() bool { return n.counted && n.left == 0 }

// tries is the counter the entry started with.
func (n entryName) tries() int { return n.left + n.done }

// entry is what Install reads of a boot entry and writes of one.
type entry struct {
	title   string
	version string
	sortKey string
	linux   string
	initrd  []string
	options []string
	// efi is the EFI program a Secure Boot image's entry starts: the
	// slot's signed unified kernel image.
	efi string
	// rootfsSHA256 is what the rootfs comment line records, or empty.
	rootfsSHA256 string
}

// newEntry returns the entry of an installed slot, in the form the build
// writes (pkg/image/esp) with the rootfs comment line added.
func newEntry(slot layout.Slot, version, sortKey string, cmdline []string, rootfsSHA256 string) entry {
	return entry{
		title:        fmt.Sprintf("Terrarium %s (slot %s)", version, slot),
		version:      version,
		sortKey:      sortKey,
		linux:        "/" + slot.KernelPath(),
		initrd:       []string{"/" + slot.InitrdPath()},
		options:      slot.Cmdline(cmdline),
		rootfsSHA256: rootfsSHA256,
	}
}

// newUKIEntry returns the entry of an installed slot that boots its signed
// unified kernel image, in the form a Secure Boot build writes: no
// command line of its own (it is inside the signed UKI).
func newUKIEntry(slot layout.Slot, version, sortKey, rootfsSHA256 string) entry {
	e := newEntry(slot, version, sortKey, nil, rootfsSHA256)
	e.linux, e.initrd, e.options = "", nil, nil
	e.efi = "/" + slot.UKIPath()
	return e
}

// render returns the entry file's content.
func (e entry) render() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "title %s\n", e.title)
	fmt.Fprintf(&b, "version %s\n", e.version)
	fmt.Fprintf(&b, "sort-key %s\n", e.sortKey)
	if e.efi != "" {
		fmt.Fprintf(&b, "efi %s\n", e.efi)
	} else {
		fmt.Fprintf(&b, "linux %s\n", e.linux)
		for _, i := range e.initrd {
			fmt.Fprintf(&b, "initrd %s\n", i)
		}
		fmt.Fprintf(&b, "options %s\n", strings.Join(e.options, " "))
	}
	if e.rootfsSHA256 != "" {
		fmt.Fprintf(&b, "%s%s\n", rootfsComment, e.rootfsSHA256)
	}
	return b.Bytes()
}

// parseEntry reads a Boot Loader Spec type #1 entry: "key value" lines;
// empty lines and comments ignored, except the rootfs comment; options
// lines joined; unknown keys ignored, as systemd-boot does.
func parseEntry(data []byte) entry {
	var e entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, rootfsComment); ok {
			e.rootfsSHA256 = strings.TrimSpace(v)
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		key, value, _ := strings.Cut(line, " ")
		value = strings.TrimSpace(value)
		switch key {
		case "title":
			e.title = value
		case "version":
			e.version = value
		case "sort-key":
			e.sortKey = value
		case "linux":
			e.linux = value
		case "efi":
			e.efi = value
		case "initrd":
			e.initrd = append(e.initrd, value)
		case "options":
			e.options = append(e.options, strings.Fields(value)...)
		}
	}
	return e
}

// nextSortKey returns the sort-key of a new entry that sorts before an
// entry of sort-key running ("" for none: an entry without a sort-key
// sorts after every entry with one).
func nextSortKey(running string) (string, error) {
	n := sortKeyFirst
	if digits, ok := strings.CutPrefix(running, sortKeyPrefix); ok && len(digits) == 9 {
		k, err := strconv.Atoi(digits)
		if err == nil && k <= 0 {
			return "", fmt.Errorf("the running entry's sort-key %q is the last one Install can count down to: %w", running, ErrBootOrder)
		}
		if err == nil {
			n = k - 1
		}
	}
	key := fmt.Sprintf("%s%09d", sortKeyPrefix, n)
	if running != "" && key >= running {
		return "", fmt.Errorf("no sort-key Install writes sorts before the running entry's %q: %w", running, ErrBootOrder)
	}
	return key, nil
}

// slotCmdline returns the new slot's kernel command line (without its
// terrarium.slot, which newEntry adds) from the running entry's.
func slotCmdline(running []string) []string {
	out := []string{}
	for _, f := range running {
		key, _, _ := strings.Cut(f, "=")
		dropped := false
		for _, d := range droppedCmdlineKeys {
			dropped = dropped || key == d
		}
		if !dropped {
			out = append(out, f)
		}
	}
	return out
}

// checkLoaderDefault checks that loader.conf's default pattern (its last
// "default" line; none selects the first entry in order) selects the
// entries of both slots, counted or not, so that the sort order alone
// decides between them. systemd-boot matches the pattern, lowercased,
// against entry ids: the file name without its boot counter.
func checkLoaderDefault(loaderConf []byte) error {
	pattern := ""
	sc := bufio.NewScanner(bytes.NewReader(loaderConf))
	for sc.Scan() {
		key, value, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if key == "default" {
			pattern = strings.ToLower(strings.TrimSpace(value))
		}
	}
	if pattern == "" {
		return nil
	}
	for _, slot := range layout.Slots() {
		ok, err := path.Match(pattern, slot.EntryFile(0))
		if err != nil || !ok {
			return fmt.Errorf("%s: default %q does not select slot %s's entry %s: %w",
				layout.ESPLoaderConf, pattern, slot, slot.EntryFile(0), ErrBootOrder)
		}
	}
	return nil
}
