package ignition

import (
	"bytes"
	"context"
	"os"
	"slices"

	"github.com/terrarium-os/terrarium/pkg/contract/ignitionspec"
)

// unitFile is one file of a unit: its own, or a drop-in.
type unitFile struct {
	path     string
	contents []byte
}

// unitFiles are the files the config writes for u.
func unitFiles(u ignitionspec.Unit) []unitFile {
	var out []unitFile
	if u.Contents != "" {
		out = append(out, unitFile{unitPath(u.Name), []byte(u.Contents)})
	}
	for _, d := range u.Dropins {
		out = append(out, unitFile{dropinPath(u.Name, d.Name), []byte(d.Contents)})
	}
	return out
}

// stopped says the config leaves u stopped (masked or disabled), so that
// it is not restarted.
func stopped(u ignitionspec.Unit) bool {
	return isTrue(u.Mask) || (u.Enabled != nil && !*u.Enabled)
}

// units writes the units' files, then has systemd reload (when a file
// changed), restart the running units whose own files changed, and enable,
// disable, mask or unmask as asked. Units start and restart without
// waiting (--no-block): a unit that fails shows in systemctl like any
// other, and the phase does not wait for one that takes long.
func (a *applier) units(ctx context.Context) error {
	changed := a.changedUnits()
	if len(changed) > 0 {
		a.st.Reload = true
		for _, name := range changed {
			if !slices.Contains(a.st.Restart, name) {
				a.st.Restart = append(a.st.Restart, name)
			}
		}
		if err := a.save(); err != nil {
			return err
		}
	}
	for _, u := range a.c.Units {
		if u.Mask != nil && !*u.Mask && u.Contents != "" && isMaskLink(a.h, u.Name) {
			// The unit's own file takes the mask's place.
			if err := os.Remove(a.h.Path(unitPath(u.Name))); err != nil {
				return err
			}
		}
		for _, f := range unitFiles(u) {
			if _, err := a.h.WriteIfChanged(f.path, f.contents, 0o644); err != nil {
				return err
			}
		}
	}
	if a.st.Reload {
		if err := a.h.Run(ctx, "systemctl", "daemon-reload"); err != nil {
			return err
		}
		a.st.Reload = false
		if err := a.save(); err != nil {
			return err
		}
	}
	if err := a.restart(ctx); err != nil {
		return err
	}
	for _, u := range a.c.Units {
		if err := a.enablement(ctx, u, slices.Contains(changed, u.Name)); err != nil {
			return err
		}
	}
	return nil
}

// changedUnits are the units of which a file differs from the config.
func (a *applier) changedUnits() []string {
	var out []string
	for _, u := range a.c.Units {
		for _, f := range unitFiles(u) {
			if old, err := os.ReadFile(a.h.Path(f.path)); err != nil || !bytes.Equal(old, f.contents) {
				out = append(out, u.Name)
				break
			}
		}
	}
	return out
}

// restart restarts the units waiting for it that run (try-restart starts
// none), except those the config stops.
func (a *applier) restart(ctx context.Context) error {
	for len(a.st.Restart) > 0 {
		name := a.st.Restart[0]
		i := slices.IndexFunc(a.c.Units, func(u ignitionspec.Unit) bool { return u.Name == name })
		// A unit a former config changed, and this one no longer
		// names, is restarted too.
		if i < 0 || !stopped(a.c.Units[i]) {
			if err := a.h.Run(ctx, "systemctl", "try-restart", "--no-block", name); err != nil {
				return err
			}
		}
		a.st.Restart = a.st.Restart[1:]
		if err := a.save(); err != nil {
			return err
		}
	}
	return nil
}

// enablement masks, unmasks, enables or disables a unit as the config
// asks, when it is not so already. Masking is seen on the host (a link to
// /dev/null); enablement is what the last apply did, as systemd would
// have to be asked. An enabled unit whose files changed is enabled again,
// for a changed [Install] section.
func (a *applier) enablement(ctx context.Context, u ignitionspec.Unit, changed bool) error {
	masked := isMaskLink(a.h, u.Name)
	if isTrue(u.Mask) {
		if masked {
			return nil
		}
		return a.h.Run(ctx, "systemctl", "mask", "--now", "--no-block", u.Name)
	}
	if u.Mask != nil && masked {
		if err := a.h.Run(ctx, "systemctl", "unmask", u.Name); err != nil {
			return err
		}
	}
	if u.Enabled == nil {
		return nil
	}
	want := *u.Enabled
	last, known := a.st.Enabled[u.Name]
	var args []string
	switch {
	case known && last == want && !(want && changed):
		return nil
	case want && known && last:
		args = []string{"reenable", u.Name}
	case want:
		args = []string{"enable", "--now", "--no-block", u.Name}
	default:
		args = []string{"disable", "--now", "--no-block", u.Name}
	}
	if err := a.h.Run(ctx, "systemctl", args...); err != nil {
		return err
	}
	if a.st.Enabled == nil {
		a.st.Enabled = map[string]bool{}
	}
	a.st.Enabled[u.Name] = want
	return a.save()
}
