package firstboot

import (
	"context"
	"fmt"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// ISOInstaller installs the ISO a live boot runs from onto the disk in
// selects; seed writes the node's enrollment into the new TERRA-STATE.
type ISOInstaller func(ctx context.Context, in machineconfig.Install, seed func(dir string) error, report host.Reporter) (installer.Result, error)

// autoInstall reports whether the kernel command line asks for an
// install to the first empty disk (the ISO's installer entry).
func (r *runner) autoInstall() bool {
	for _, f := range strings.Fields(r.cmdline) {
		if v, ok := strings.CutPrefix(f, layout.CmdlineInstall+"="); ok && v == "auto" {
			return true
		}
	}
	return false
}

// installWithoutConfig reports whether the ISO's installer entry installs
// at once: no config medium offers a config yet, so the installed system
// starts unenrolled and waits for one, like a disk written with dd.
func (r *runner) installWithoutConfig(ctx context.Context) bool {
	if r.o.InstallISO == nil || !r.autoInstall() {
		return false
	}
	if e, _ := r.journal(); e != nil {
		return false
	}
	found, err := r.probe(ctx, r.o.Sources)
	return found == nil && err == nil
}

// installRequest says whether this boot installs, and where to: the
// config's install section, else terrarium.install=auto (any empty
// disk). Only a live boot installs; a node on its disk says it ignores
// the section.
func (r *runner) installRequest(cfg *machineconfig.Config) (machineconfig.Install, bool) {
	auto := r.autoInstall()
	if r.o.InstallISO == nil {
		if cfg.Install != nil && r.boot <= 1 {
			r.say("install: ignored: this node runs from its disk, not from the ISO")
		}
		return machineconfig.Install{}, false
	}
	switch {
	case cfg.Install != nil:
		return *cfg.Install, true
	case auto:
		return machineconfig.Install{}, true
	}
	return machineconfig.Install{}, false
}

// installToDisk installs, and reboots into the installed system, which
// starts enrolled with this node's config (cfg), or waits for a config
// (cfg nil).
func (r *runner) installToDisk(ctx context.Context, cfg *machineconfig.Config, in machineconfig.Install) error {
	r.set(func(s *status.Status) {
		s.State, s.Message = status.StateInstalling, "installing onto "+in.Disk.String()
	})
	r.publish()
	r.say("installing Terrarium %s onto %s", r.rel.Version, in.Disk)
	var seed func(dir string) error
	if cfg != nil {
		seed = r.seed(cfg)
	} else {
		r.say("no config medium: the installed system will wait for one, as a disk written with dd does")
	}
	res, err := r.o.InstallISO(ctx, in, seed, host.ReporterFunc(r.report))
	if err != nil {
		// Not an error of firstboot's: restarting it would only try the
		// same install again. The node waits, live, for a person.
		r.set(func(s *status.Status) { s.State, s.Message = status.StateFailed, "install: "+err.Error() })
		r.note("install", step.Failed, err.Error())
		r.say("install failed:")
		for _, line := range strings.Split(err.Error(), "\n") {
			r.say("  %s", line)
		}
		r.say("this node stays live and applies nothing of its config; fix the config's install section and boot the ISO again with it")
		r.publish()
		<-ctx.Done()
		return nil
	}
	r.note("install", step.Installed, res.Target.String())
	r.set(func(s *status.Status) {
		s.State, s.Message = status.StateInstalled, "installed onto "+res.Target.String()
	})
	r.publish()
	r.say("installed Terrarium %s onto %s (slot A sha256 %s, read back from the disk); rebooting into it", r.rel.Version, res.Target, res.SlotSHA256)
	return r.o.Reboot(ctx)
}

// seed returns what writes the installed system's TERRA-STATE: the
// stored config and the enrollment, so it boots enrolled without the
// config medium.
func (r *runner) seed(cfg *machineconfig.Config) func(dir string) error {
	return func(dir string) error {
		data, err := cfg.Marshal()
		if err != nil {
			return fmt.Errorf("seed the node config: %w", err)
		}
		state := nodestate.At(dir)
		if err := state.StoreConfig(data); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		now := r.o.Host.Now().UTC()
		if err := state.CreateMarker(nodestate.Marker{Created: now, Slot: string(layout.SlotA), InstalledFrom: "ISO " + r.rel.Version}); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		from := "the ISO installer"
		if e, _ := r.journal(); e != nil {
			from = e.Source + ", installed from the ISO"
		}
		st, err := state.OpenJournal()
		if err != nil {
			return fmt.Errorf("seed the journal: %w", err)
		}
		if err := st.Update(func(j *nodestate.Journal) {
			j.Enrollment = &nodestate.Enrollment{Digest: cfg.Digest(), Source: from, At: now}
		}); err != nil {
			return fmt.Errorf("seed the journal: %w", err)
		}
		return nil
	}
}
