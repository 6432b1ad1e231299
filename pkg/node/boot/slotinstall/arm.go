package slotinstall

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Arm makes the slot Stage wrote the one tried at the next boot: its
// staged entry is renamed to its .conf name and the directory synced,
// the commit Install makes at its end (step 5 of the package
// documentation). staged is Stage's Result. Arm writes nothing and
// returns an error wrapping ErrNotStaged when the ESP no longer holds
// that staged entry (an install since replaced it), and the errors of
// Install's checks when the running slot's entry is not alone and
// blessed. A power cut leaves the entry staged or committed, never
// anything else.
func Arm(ctx context.Context, esp ESP, staged Result, report host.Reporter) (Result, error) {
	return arm(ctx, esp, staged, report, ops{})
}

// arm is Arm with its file system calls made through w.
func arm(ctx context.Context, esp ESP, staged Result, report host.Reporter, w ops) (Result, error) {
	res := staged
	if !staged.Staged || !staged.Slot.Valid() {
		return res, errors.New("slotinstall: Arm takes what Stage returned")
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	rootfs, _ := staged.Manifest.PartByRole(upgrade.RoleRootfs)
	target, running := staged.Slot, staged.Slot.Other()
	var final string
	err := esp.WithESP(true, func(dir string) error {
		st, err := readESP(dir, running, w.free)
		if err != nil {
			return err
		}
		if len(st.running) != 1 {
			return fmt.Errorf("slot %s (running) has %d entries in %s: %w", running, len(st.running), layout.ESPEntriesDir, ErrNoRunningEntry)
		}
		if st.running[0].name.counted {
			return fmt.Errorf("slot %s's entry %s: %w", running, st.running[0].name.file, ErrRunningOnTrial)
		}
		var e *entryFile
		for i := range st.staged {
			s := &st.staged[i]
			if s.path() == staged.Entry && s.version == staged.Manifest.Version && s.rootfsSHA256 == rootfs.SHA256 {
				e = s
			}
		}
		if e == nil || len(st.target) > 0 {
			return fmt.Errorf("slot %s, %s of %s: %w", target, staged.Entry, staged.Manifest.Version, ErrNotStaged)
		}
		entries := espPath(dir, layout.ESPEntriesDir)
		final = strings.TrimSuffix(e.name.file, stagedSuffix)
		if err := w.rename(filepath.Join(entries, e.name.file), filepath.Join(entries, final)); err != nil {
			return fmt.Errorf("commit the boot entry %s: %w", final, err)
		}
		return w.syncDir(entries)
	})
	if err != nil {
		return res, fmt.Errorf("upgrade to %s: arm slot %s: %w", staged.Manifest.Version, target, err)
	}
	res.Entry, res.Staged = layout.ESPEntriesDir+"/"+final, false
	// The staged entry, written last, goes by its own name now.
	res.Files = append([]string(nil), staged.Files...)
	if n := len(res.Files); n > 0 && res.Files[n-1] == staged.Entry {
		res.Files = res.Files[:n-1]
	}
	res.Files = append(res.Files, res.Entry)
	report.Report(reportStep, step.Installed, fmt.Sprintf("%s in slot %s, tried at the next boot (%d tries)",
		staged.Manifest.Version, target, res.Tries))
	return res, nil
}
