// Package firstboot is the appliance's runner, started by systemd at every
// boot. It enrolls the node from the first valid config its sources offer
// (or loads the stored one), reconciles the node through its phases
// (pkg/node/config/nodephases, registryphase, kubeadmflow: each phase checks
// before it acts), records each step in the node state on TERRA-STATE,
// reports status on the console and in /run/terrarium/status.json, blesses
// the boot only when its health check passes, and then watches for signed
// config changes.
package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/config/ignition"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodephases"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryphase"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmflow"
	"github.com/terrarium-os/terrarium/pkg/node/ops/diskspace"
	"github.com/terrarium-os/terrarium/pkg/node/ops/timesync"
	"github.com/terrarium-os/terrarium/pkg/node/phase"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"

	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
)

// Options wires firstboot to its machine. Every field has a production
// value from Defaults; tests replace them.
type Options struct {
	Host *host.Host
	// Cluster are what a cluster node's formation asks beyond the host
	// (pkg/node/kube/kubeadmflow): the container runtime, the API, timing.
	Cluster kubeadmflow.Deps
	Console io.Writer // what a person at the machine reads
	Log     *slog.Logger
	// Sources are probed in order until one offers a config, while the
	// node is not enrolled (docs/config-acquisition.md).
	Sources []configsource.Provider
	// ChangeSources are probed at every boot of an enrolled node for a
	// signed change request: the media a person inserts.
	ChangeSources []configsource.Provider
	// BootLoader blesses the boot.
	BootLoader bootloader.BootLoader
	// Reboot restarts the machine (after a failed trial boot).
	Reboot       func(ctx context.Context) error
	PollInterval time.Duration
	// WatchInterval is how often a running node looks for a change
	// request after its boot; 0 means it does not (firstboot run then
	// ends after the boot is blessed).
	WatchInterval time.Duration
	// AddressWait bounds the wait for configured interfaces' addresses.
	AddressWait time.Duration
	// Install writes an upgrade file into the slot that is not running.
	Install Installer
	// Stage writes one there staged, and Arm makes it the next boot: the
	// cluster's rollout stages an upgrade before the node is drained.
	Stage Installer
	Arm   Armer
	// StageAlong, on a control plane a stick is put into, stages the
	// upgrade from the reads that copy it into the upgrade share (nil:
	// its rollout's turn stages it from the share, as on every other
	// node).
	StageAlong StreamStager
	// InstallISO, on a live boot from the ISO, installs it onto a disk
	// (the config's install section, or terrarium.install=auto); nil on a
	// node running from its disk.
	InstallISO ISOInstaller
	// Media finds and mounts the sticks a person inserts into the running
	// node (TERRA-SUPPORT).
	Media media.Media
	// TimeSync bounds a following node's wait for its first time from
	// the control planes (pkg/node/ops/timesync).
	TimeSync timesync.Sync
	// TrialRebootDelay is how long a failed trial boot stays up (for a
	// person to read the console) before it reboots into the fallback.
	TrialRebootDelay time.Duration
	// Rollout is the node's part in its cluster's upgrades.
	Rollout rollouts.Options
	// InPlace runs an upgrade that changes nothing but Kubernetes without
	// a reboot; nil: every upgrade reboots.
	InPlace InPlacer
	// Space tells the free space of a file system, checked before an
	// upgrade file, a snapshot or a backup is written (nil: statfs).
	Space diskspace.FS
}

// Run provisions or verifies the machine, then blesses the boot if healthy.
func Run(ctx context.Context, o Options) error {
	r, err := newRunner(o)
	if err != nil {
		return err
	}
	return r.run(ctx)
}

// After the boot sequence, the runner's controllers (controllers.go) run
// at once, each in its own goroutine: what they share is safe for that —
// the status has its publisher, the node state its store, the running
// config and the time a reboot was asked are behind their own locks, and
// changing holds off a second change of the node while one is under way.
type runner struct {
	o      Options
	rel    *release.Release
	slot   layout.Slot
	bootID string
	// state is the node's persisted state, written only through it.
	state *nodestate.Store
	boot  int
	// changeSeen is the fingerprint of what the change sources offered
	// when the boot looked at them (judged once); the change controller
	// goes on from it.
	changeSeen string
	// pub owns the node's published status.
	pub *status.Publisher
	// cmdline is this boot's kernel command line (the slot's).
	cmdline string
	// secureBoot is the firmware's Secure Boot mode at this boot.
	secureBoot efiboot.SecureBootMode
	// stateEncryption is TERRA-STATE's encryption at this boot, as the
	// initramfs found or made it (layout.RunStateEncryption); "" when it
	// did not say (an initramfs of an earlier release); plainBecause says
	// why a plain one is.
	stateEncryption, plainBecause string
	// flow forms or joins the cluster (a cluster node's later phases).
	flow *kubeadmflow.Flow
	// changing is held by whatever changes the node while it runs — a
	// config change, an upgrade's install and its reboot, the rollout's
	// turn — so that one never runs beside another.
	changing controller.ChangeLock
	// cfg is the config the node runs, replaced by an applied change.
	cfg configHolder
	// reboot is when this boot last asked for a reboot into an upgrade,
	// which takes a while to come.
	reboot rebootClock
	// rollouts is the node's part in its cluster's upgrades, made once
	// a boot.
	rollouts *rollouts.Controller
	// ranOut are the waiting phases (phase.Phase.Waits) whose wait ran
	// out in the last apply, with what it ran out on: the health check
	// after it does not wait for them again. apply and health run one
	// after the other, in the boot or under the change lock.
	ranOut map[string]error
	// inPlace is what the node decided of the upgrade it staged last.
	inPlace stagedInPlace
}

func newRunner(o Options) (*runner, error) {
	h := o.Host
	rel, err := release.Load(h.Path(layout.ReleaseFile))
	if err != nil {
		return nil, err
	}
	cmdline, _ := os.ReadFile(h.Path("/proc/cmdline"))
	slot := layout.SlotA
	for _, f := range strings.Fields(string(cmdline)) {
		if v, ok := strings.CutPrefix(f, layout.CmdlineSlot+"="); ok && layout.Slot(v).Valid() {
			slot = layout.Slot(v)
		}
	}
	bootID, _ := os.ReadFile(h.Path("/proc/sys/kernel/random/boot_id"))
	files := nodestate.On(h)
	state, err := files.OpenJournal()
	if err != nil {
		return nil, err
	}
	// One line at a time on the console, whichever goroutine reports.
	o.Console = &lockedWriter{w: o.Console}
	r := &runner{o: o, rel: rel, slot: slot, bootID: strings.TrimSpace(string(bootID)), state: state, cmdline: string(cmdline)}
	r.changing.Say = r.say
	r.flow, err = kubeadmflow.New(h, o.Cluster, state, host.ReporterFunc(r.report), r.updateCluster)
	if err != nil {
		return nil, err
	}
	if o.InPlace != nil && o.InPlace.Active() != "" {
		// firstboot restarted in a boot that runs the other slot's
		// Kubernetes in place: its bundle names the Kubernetes to run.
		r.flow.SetKubernetesRoot(layout.InPlaceSlotDir)
	}
	state.Read(func(j *nodestate.Journal) { r.boot = j.Current(r.bootID, string(slot)).Boot })
	created, err := files.ReadMarker()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		o.Log.Warn("status: TERRA-STATE's creation is not shown", "err", err)
	}
	r.secureBoot, err = efiboot.Vars{Dir: h.Path(efiboot.DefaultDir)}.SecureBoot()
	if err != nil {
		o.Log.Warn("status: the firmware's Secure Boot mode is not shown", "err", err)
	}
	if b, err := os.ReadFile(h.Path(layout.RunStateEncryption)); err == nil {
		r.stateEncryption, r.plainBecause, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
	} else if !errors.Is(err, fs.ErrNotExist) {
		o.Log.Warn("status: TERRA-STATE's encryption is not shown", "err", err)
	}
	r.pub = status.NewPublisher(h.Path(status.File), o.Console, o.Log, status.Status{
		Name: rel.Name, Version: rel.Version, Slot: string(slot), Boot: r.boot,
		StateCreated: created, SecureBoot: string(r.secureBoot), StateEncryption: r.stateEncryption,
	})
	r.rollouts = r.newRollouts()
	return r, nil
}

// set changes the status; the next publication shows it.
func (r *runner) set(fn func(s *status.Status)) { r.pub.Update(fn) }

// publish publishes the status.
func (r *runner) publish() { r.pub.Publish(nil) }

func (r *runner) say(format string, args ...any) {
	_, _ = fmt.Fprintf(r.o.Console, "terrarium: "+format+"\n", args...) // the log below keeps it
	r.o.Log.Info(fmt.Sprintf(format, args...))
}

// saySecureBoot tells the console whether the firmware checked what it
// booted, and warns of a machine anyone can enroll keys into.
func (r *runner) saySecureBoot() {
	switch r.secureBoot {
	case efiboot.SecureBootOn:
		r.say("Secure Boot: on (the firmware ran only boot files its db allows)")
	case efiboot.SecureBootSetup:
		r.say("Secure Boot: setup mode: the firmware has no platform key, so whoever boots this machine can enroll keys; enroll the site's (docs/secure-boot.md)")
	case "":
	default:
		r.say("Secure Boot: %s", r.secureBoot)
	}
}

// stateEncryptionAdmissible refuses a config that requires an encrypted
// TERRA-STATE (required, the config's state.encryption) on a node whose
// STATE is not (inForce, what the initramfs said, and plainBecause, why).
func stateEncryptionAdmissible(required, inForce, plainBecause string) error {
	if required != layout.StateEncryptionTPM || inForce == layout.StateEncryptionTPM {
		return nil
	}
	why := plainBecause
	if inForce == "" {
		why = "this slot's initramfs does not say that it is"
	}
	return fmt.Errorf("state.encryption: %q requires TERRA-STATE encrypted with a key the TPM seals, and this node's is not (%s): switch the machine's TPM 2.0 on in its firmware and boot once with %s on the kernel command line to make TERRA-STATE again, encrypted (this erases it); or set state.encryption: %q to accept it plain",
		required, why, layout.CmdlineResetState, layout.StateEncryptionNone)
}

// sayStateEncryption tells the console whether TERRA-STATE, which holds
// every secret the node has, is encrypted.
func (r *runner) sayStateEncryption() {
	switch r.stateEncryption {
	case layout.StateEncryptionTPM:
		r.say("TERRA-STATE: encrypted (LUKS2, its key sealed by this machine's TPM)")
	case layout.StateEncryptionNone:
		r.say("TERRA-STATE: NOT encrypted: %s, and a copy of its disk gives away the node's secrets (docs/state-encryption.md)", r.plainBecause)
	}
}

// record changes the node state and this boot's record, and saves them.
func (r *runner) record(fn func(j *nodestate.Journal, rec *nodestate.BootRecord)) error {
	return r.state.Update(func(j *nodestate.Journal) {
		fn(j, j.Current(r.bootID, string(r.slot)))
	})
}

// journal returns a copy of the node state's top-level records.
func (r *runner) journal() (enrollment *nodestate.Enrollment, provisioned *nodestate.Provisioned) {
	r.state.Read(func(j *nodestate.Journal) {
		if j.Enrollment != nil {
			e := *j.Enrollment
			enrollment = &e
		}
		if j.Provisioned != nil {
			p := *j.Provisioned
			provisioned = &p
		}
	})
	return enrollment, provisioned
}

func (r *runner) step(name string, result step.Result, detail string) error {
	at := r.o.Host.Now().UTC()
	return r.record(func(_ *nodestate.Journal, rec *nodestate.BootRecord) {
		rec.Steps = append(rec.Steps, nodestate.StepRecord{Name: name, Result: result, Detail: detail, At: at})
	})
}

// note records a step that what the node does next does not depend on: a
// journal write that fails is logged, and the node goes on.
func (r *runner) note(name string, result step.Result, detail string) {
	if err := r.step(name, result, detail); err != nil {
		r.o.Log.Warn("journal: step not recorded", "step", name, "result", result, "detail", detail, "err", err)
	}
}

func (r *runner) run(ctx context.Context) error {
	if err := r.record(func(*nodestate.Journal, *nodestate.BootRecord) {}); err != nil {
		return fmt.Errorf("journal on TERRA-STATE: %w", err)
	}
	r.say("Terrarium %s, slot %s, boot %d", r.rel.Version, r.slot, r.boot)
	r.saySecureBoot()
	r.sayStateEncryption()
	// A clock that reads before this image was built (a flat RTC
	// battery) is wrong: stepped before anything is recorded.
	if err := timesync.StepForward(ctx, r.o.Host, timesync.Floor(r.o.Host, nil).Later(r.lastRecorded()), host.ReporterFunc(r.report)); err != nil {
		r.say("%v", err)
	}
	r.settleUpgrade(ctx)
	if r.installWithoutConfig(ctx) {
		return r.installToDisk(ctx, nil, machineconfig.Install{})
	}
	cfg, ch, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	if sel, ok := r.installRequest(cfg); ok {
		return r.installToDisk(ctx, cfg, sel)
	}
	r.ensureRecoveryKey(ctx, cfg)
	if ch != nil {
		cfg = r.applyChange(ctx, cfg, ch)
	} else if err := r.provisionOrVerify(ctx, cfg); err != nil {
		// An upgrade's trial boot whose phases fail (a Kubernetes
		// upgrade that does not go through) uses up its tries and falls
		// back, instead of systemd restarting the same failure here for
		// ever. Any other boot keeps retrying (systemd restarts firstboot),
		// which is how a node formation resumes after a power cut.
		u := r.state.LastUpgrade()
		switch {
		case u != nil && u.State == nodestate.UpgradeInstalled && string(r.slot) == u.ToSlot:
			return r.notBlessed(ctx, err)
		case u != nil && u.State == nodestate.UpgradeInstalled && !u.InPlaceAt.IsZero() && u.InPlaceBoot == r.bootID:
			// firstboot restarted while this boot ran an upgrade's
			// Kubernetes in place: the rollout's turn takes the run up
			// again, or reboots into the slot, from the watch.
			r.say("the upgrade run in place: %v; its turn tries again, or reboots into slot %s", err, u.ToSlot)
		default:
			return err
		}
	}
	r.waitForAddresses(ctx, cfg)
	err = r.healthAndBless(ctx, cfg)
	if r.o.WatchInterval <= 0 || ctx.Err() != nil {
		return err
	}
	if err != nil {
		r.o.Log.Error("unhealthy; still watching for a signed change that repairs the node", "err", err)
	}
	return r.watch(ctx, cfg)
}

// provisionOrVerify applies the desired config on its first boot and
// verifies (heals) it on later ones.
func (r *runner) provisionOrVerify(ctx context.Context, cfg *machineconfig.Config) error {
	digest := cfg.Digest()
	mode := "provision"
	if _, p := r.journal(); p != nil && p.ConfigDigest == digest {
		mode = "verify"
	}
	if err := r.record(func(_ *nodestate.Journal, rec *nodestate.BootRecord) { rec.Mode = mode }); err != nil {
		return err
	}
	if err := r.apply(ctx, cfg, mode); err != nil {
		if rerr := r.record(func(_ *nodestate.Journal, rec *nodestate.BootRecord) { rec.Result = "failed" }); rerr != nil {
			r.o.Log.Warn("journal: boot result not recorded", "mode", mode, "result", "failed", "err", rerr)
		}
		r.set(func(s *status.Status) { s.State, s.Message = status.StateFailed, err.Error() })
		r.publish()
		return err
	}
	state := status.StateVerified
	if mode == "provision" {
		state = status.StateProvisioned
	}
	return r.applied(cfg, mode, state)
}

// applied records that cfg is in place.
func (r *runner) applied(cfg *machineconfig.Config, mode, state string) error {
	digest := cfg.Digest()
	at := r.o.Host.Now().UTC()
	r.set(func(s *status.Status) { s.State = state })
	r.set(func(s *status.Status) { s.Hostname, s.Mode, s.ConfigDigest = cfg.Hostname, mode, digest })
	return r.record(func(j *nodestate.Journal, rec *nodestate.BootRecord) {
		if mode != "verify" {
			j.Provisioned = &nodestate.Provisioned{ConfigDigest: digest, At: at, Boot: rec.Boot}
		}
		rec.Result = state
	})
}

// applyChange reconciles the node to an accepted change: each phase
// touches only what differs. When a phase fails, the enrolled config is
// applied again, so the node is as it was, and the console says so; the
// node runs on with it. It returns the config the node now runs.
func (r *runner) applyChange(ctx context.Context, stored *machineconfig.Config, ch *change) *machineconfig.Config {
	err := r.record(func(_ *nodestate.Journal, rec *nodestate.BootRecord) { rec.Mode = "change" })
	if err == nil {
		err = r.apply(ctx, ch.cfg, "change")
	}
	if err == nil {
		err = r.commitChange(ch)
	}
	if err == nil {
		if err := r.applied(ch.cfg, "change", status.StateChanged); err != nil {
			r.say("record the change: %v", err)
		}
		if e, _ := r.journal(); e != nil {
			r.set(func(s *status.Status) { s.Enrolled = e.Summary() })
		}
		return ch.cfg
	}
	r.say("the config change from %s FAILED (%v); restoring the enrolled config", ch.from, err)
	r.note("config change", step.Failed, err.Error())
	if rerr := r.apply(ctx, stored, "provision"); rerr != nil {
		r.say("restoring the enrolled config failed too: %v", rerr)
		r.set(func(s *status.Status) { s.State, s.Message = status.StateFailed, rerr.Error() })
	} else {
		r.say("the enrolled config is in place again: nothing of the change remains")
		if aerr := r.applied(stored, "verify", status.StateVerified); aerr != nil {
			r.o.Log.Warn("journal: restored config not recorded", "digest", stored.Digest(), "result", status.StateVerified, "err", aerr)
		}
		r.set(func(s *status.Status) {
			s.Message = fmt.Sprintf("config change from %s failed and was undone: %v", ch.from, err)
		})
	}
	return stored
}

// acquire returns the node's desired config. An enrolled node reads it
// from its stored state, and looks for a change request on its change
// sources; a node not enrolled waits for a valid config from its sources
// and enrolls with it. Nothing is applied while the config is missing or
// invalid; the console says what to do.
func (r *runner) acquire(ctx context.Context) (*machineconfig.Config, *change, error) {
	if e, _ := r.journal(); e != nil {
		stored, err := r.loadStored(e)
		if err == nil {
			err = r.settleStored(stored)
			e, _ = r.journal()
		}
		if err != nil {
			r.set(func(s *status.Status) { s.State, s.Message = status.StateFailed, err.Error() })
			r.say("%v", err)
			r.publish()
			return nil, nil, err
		}
		r.set(func(s *status.Status) { s.Enrolled = e.Summary() })
		r.say("enrolled %s; running from the stored config (%s)", e.Summary(), e.Digest)
		return stored, r.changeRequest(ctx, stored), nil
	}
	var lastProblem string
	for {
		found, err := r.probe(ctx, r.o.Sources)
		problem := ""
		switch {
		case err != nil:
			problem = err.Error()
		case found == nil:
			problem = "waiting"
		default:
			cfg, perr := parseConfig(found.Source, found.Config)
			if perr == nil {
				perr = r.admissible(cfg)
			}
			if perr == nil {
				r.say("config from %s is valid (%s)", found.Source, cfg.Digest())
				if err := r.enroll(cfg, found.Source); err != nil {
					return nil, nil, err
				}
				// The note about a missing or invalid config is settled.
				r.set(func(s *status.Status) { s.Message = "" })
				if e, _ := r.journal(); e != nil {
					r.set(func(s *status.Status) { s.Enrolled = e.Summary() })
				}
				return cfg, nil, nil
			}
			problem = perr.Error()
		}
		if problem != lastProblem {
			r.reportConfigProblem(problem)
			lastProblem = problem
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(r.o.PollInterval):
		}
	}
}

// admissible reports what makes a valid config unusable on this machine
// now, before anything is applied: a bootstrap token that expired before
// it was used (the init node creates it in the cluster, the others join
// with it; afterwards its expiry no longer matters).
//
// An interface named like a kernel link (eth0) on a slot that names links
// predictably would match nothing, and an admin named like an account or
// group the image already has (other than the admin firstboot itself
// created) would make useradd fail halfway through apply: both are
// validation errors instead.
func (r *runner) admissible(cfg *machineconfig.Config) error {
	// A link name this slot's naming scheme never gives would leave the
	// node unreachable.
	if err := machineconfig.CheckLinkNaming(cfg, r.cmdline); err != nil {
		return err
	}
	if err := r.admissibleIgnition(cfg); err != nil {
		return err
	}
	if err := stateEncryptionAdmissible(cfg.StateEncryption(), r.stateEncryption, r.plainBecause); err != nil {
		return err
	}
	if name := nodephases.AdminName(cfg); name != "" && name != nodephases.ManagedAdmin(r.o.Host) {
		file, err := r.o.Host.NameTaken(name)
		if err != nil {
			return fmt.Errorf("admin.name: cannot check %q against this image's accounts: %w", name, err)
		}
		if file != "" {
			return fmt.Errorf("admin.name: %q is already an account or group of this image (%s); choose another name, such as \"ops\"", name, file)
		}
	}
	return r.flow.Admissible(cfg)
}

func (r *runner) reportConfigProblem(problem string) {
	if problem == "waiting" {
		r.set(func(s *status.Status) { s.State = status.StateWaiting })
		r.set(func(s *status.Status) { s.Message = "insert a config disk labelled TERRA-CONFIG holding machine.yaml" })
		r.say("no config disk found: insert a disk or USB stick labelled %s holding %s (make one with 'imagebuild config disk'); waiting", layout.LabelConfig, "machine.yaml")
	} else {
		r.set(func(s *status.Status) { s.State = status.StateConfigInvalid })
		r.set(func(s *status.Status) { s.Message = problem })
		r.say("the config is invalid; nothing was applied. Fix these and re-insert the disk:")
		for _, line := range strings.Split(problem, "\n") {
			r.say("  %s", line)
		}
	}
	r.note("config", step.Waiting, r.pub.Get().Message)
	r.publish()
}

// apply runs each phase: provision applies; verify checks and heals what
// drifted; change applies the changed config. A phase that waits
// (phase.Phase.Waits) for the node to get somewhere on its own is looked
// at first on any boot but the first, and its wait never stops the boot:
// a wait that runs out is recorded, the phases after it run (one of them
// may be what the node needs, a rollback's restore say), and the health
// check decides.
func (r *runner) apply(ctx context.Context, cfg *machineconfig.Config, mode string) error {
	r.watchHost(cfg)
	return r.applyPhases(ctx, cfg, r.phases(cfg), mode)
}

// applyPhases runs phases in mode: "provision" applies each, "verify"
// and "in place" apply each whose check fails ("change" a changed
// config's).
func (r *runner) applyPhases(ctx context.Context, cfg *machineconfig.Config, phases []phase.Phase, mode string) error {
	r.ranOut = map[string]error{}
	for _, p := range phases {
		if p.Waits {
			if err := r.wait(ctx, cfg, p, mode); err != nil {
				return err
			}
			continue
		}
		if mode == "verify" || mode == "in place" {
			err := p.Verify(ctx, cfg)
			if err == nil {
				if err := r.step(p.Name, step.Verified, ""); err != nil {
					return err
				}
				continue
			}
			if mode == "verify" {
				r.say("%s drifted (%v); healing", p.Name, err)
			} else {
				r.say("%s: %v; applying it in place", p.Name, err)
			}
		}
		if err := p.Apply(ctx, cfg); err != nil {
			r.note(p.Name, step.Failed, err.Error())
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		result := step.Applied
		switch mode {
		case "verify":
			result = step.Healed
		case "change":
			result = step.Changed
		}
		if err := r.step(p.Name, result, ""); err != nil {
			return err
		}
		r.say("%s: %s", p.Name, result)
	}
	return nil
}

// wait runs a phase that waits: on a boot after the first it looks first
// and waits only when the node is not there yet. It returns only a
// journal that cannot be written.
func (r *runner) wait(ctx context.Context, cfg *machineconfig.Config, p phase.Phase, mode string) error {
	result := step.Applied
	if mode != "provision" {
		err := p.Verify(ctx, cfg)
		if err == nil {
			return r.step(p.Name, step.Verified, "")
		}
		r.say("%s: not yet (%v); waiting", p.Name, err)
		result = step.Reached
	}
	if err := p.Apply(ctx, cfg); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		r.note(p.Name, step.Failed, err.Error())
		r.say("%s: %v; going on, the health check decides", p.Name, err)
		r.ranOut[p.Name] = err
		return nil
	}
	if err := r.step(p.Name, result, ""); err != nil {
		return err
	}
	r.say("%s: %s", p.Name, result)
	return nil
}

// waitForAddresses gives configured interfaces a moment (DHCP) to get
// their addresses, so the banner shows them. It never fails the boot: a
// DHCP server that is down must not roll the node back.
func (r *runner) waitForAddresses(ctx context.Context, cfg *machineconfig.Config) {
	if len(cfg.Network.Interfaces) == 0 {
		return
	}
	deadline := r.o.Host.Now().Add(r.o.AddressWait)
	for len(status.Addresses()) == 0 && r.o.Host.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watchHost shows a cluster node's role in the status before its phases
// report.
func (r *runner) watchHost(cfg *machineconfig.Config) {
	if cfg.Cluster != nil {
		r.updateCluster(func(s *kubeadmflow.ClusterStatus) {
			if s.Role == "" {
				s.Role = cfg.Cluster.Role
			}
		})
	}
}

// report lets long phases report their steps: each goes to the journal,
// the console and the published status.
func (r *runner) report(name string, result step.Result, detail string) {
	r.note(name, result, detail)
	if detail != "" {
		r.say("%s: %s: %s", name, result, detail)
	} else {
		r.say("%s: %s", name, result)
	}
	if result.ShowsInStatus() {
		r.publish()
	}
}

// updateCluster changes what the status says about the cluster.
func (r *runner) updateCluster(update func(*kubeadmflow.ClusterStatus)) {
	r.set(func(s *status.Status) {
		if s.Cluster == nil {
			s.Cluster = &kubeadmflow.ClusterStatus{}
		}
		update(s.Cluster)
	})
}

// phases are the phases of a config, in order: the node's own, its time,
// its registry's, then (on a cluster node) the cluster's.
func (r *runner) phases(c *machineconfig.Config) []phase.Phase {
	// The clock is right before the registry phase issues a certificate
	// and the cluster's phases check any.
	ps := append(nodephases.Phases(r.o.Host), timesync.Phase(r.o.Host, r.o.TimeSync, host.ReporterFunc(r.report)), registryphase.Phase(r.o.Host))
	// An Ignition part was checked whole before the config was admitted;
	// it runs after the node's own phases (its users may join the admin's
	// groups, its units may need the registry).
	if ign, err := ignitionOf(c); err == nil && ign != nil {
		ps = append(ps, ignition.Phase(r.o.Host, ign))
	}
	if c.Cluster == nil {
		return ps
	}
	// A worker's wait for its time goes just before the cluster's
	// steps that check certificates (timesync.SyncedPhase).
	for _, p := range r.flow.Phases() {
		if p.Name == kubeadmflow.PhaseKubernetes {
			ps = append(ps, timesync.SyncedPhase(r.o.Host, r.o.TimeSync, host.ReporterFunc(r.report)))
		}
		ps = append(ps, p)
	}
	return ps
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lastRecorded is the latest time the node state recorded: a time that has
// passed, whatever the clock says now.
func (r *runner) lastRecorded() timesync.Known {
	var last time.Time
	r.state.Read(func(j *nodestate.Journal) {
		for _, b := range j.Boots {
			for _, s := range b.Steps {
				if s.At.After(last) {
					last = s.At
				}
			}
		}
	})
	return timesync.Known{At: last, What: "the last step this node recorded"}
}
