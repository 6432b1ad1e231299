package firstboot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
	"github.com/terrarium-os/terrarium/pkg/node/config/media"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/controller/rollouts"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/kube/rollout"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// Installer writes a verified upgrade file into the slot that is not
// running (pkg/node/boot/slotinstall on the real disk).
// It reports its progress to report.
type Installer func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error)

// Armer makes the slot an Installer staged (slotinstall.Options.Stage)
// the next boot (slotinstall.Arm on the real disk).
type Armer func(ctx context.Context, staged slotinstall.Result, report host.Reporter) (slotinstall.Result, error)

// DiskInstaller installs into the slot partitions and the ESP of this
// machine. The new slot's entry gets the boot tries the running build was
// made with (its release's BootTries).
func DiskInstaller(h *host.Host, devices slotinstall.SlotDevices, esp slotinstall.ESP) Installer {
	return diskInstaller(h, devices, esp, false)
}

// DiskStager is DiskInstaller leaving the new slot staged, for DiskArmer.
func DiskStager(h *host.Host, devices slotinstall.SlotDevices, esp slotinstall.ESP) Installer {
	return diskInstaller(h, devices, esp, true)
}

func diskInstaller(h *host.Host, devices slotinstall.SlotDevices, esp slotinstall.ESP, stage bool) Installer {
	return func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error) {
		return slotinstall.Install(ctx, diskOptions(h, devices, esp, v, running, installed, policy, report, stage))
	}
}

func diskOptions(h *host.Host, devices slotinstall.SlotDevices, esp slotinstall.ESP, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter, stage bool) slotinstall.Options {
	return slotinstall.Options{Upgrade: v, Running: running, Installed: installed, Policy: policy,
		Devices: devices, ESP: esp, Reporter: report, Clock: h.Clock, Tries: installed.BootTries,
		FirmwareDB: efiboot.Vars{Dir: h.Path(efiboot.DefaultDir)}.DBCertificates, Stage: stage}
}

// StreamStager begins staging a verified upgrade file into the slot that
// is not running from the reads that copy it into the node's upgrade
// share (rollouts.Upgrade.Slot): the control plane a stick was put into
// reads and hashes it once for both.
// Its Result says whether it changed the slot, with its error too.
type StreamStager func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (rollouts.SlotStream, slotinstall.Result, error)

// DiskStreamStager is DiskStager's StreamStager (slotinstall.Begin).
func DiskStreamStager(h *host.Host, devices slotinstall.SlotDevices, esp slotinstall.ESP) StreamStager {
	return func(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (rollouts.SlotStream, slotinstall.Result, error) {
		s, res, err := slotinstall.Begin(ctx, diskOptions(h, devices, esp, v, running, installed, policy, report, true))
		if err != nil {
			return nil, res, err
		}
		return slotStream{s}, res, nil
	}
}

// slotStream is a slotinstall.Stream as a rollouts.SlotStream.
type slotStream struct{ *slotinstall.Stream }

func (s slotStream) Finish(ctx context.Context, twin io.Reader) error {
	_, err := s.Stream.Finish(ctx, twin)
	return err
}

// slotAlong begins staging v into the other slot along its copy into the
// share (Options.StageAlong), unless this node cannot write that slot
// now, and sets *begun once it changed that slot (a Begin that failed
// may have too); nil without a StageAlong.
func (r *runner) slotAlong(v *upgrade.Verified, policy upgrade.Policy, begun *bool) func(context.Context) (rollouts.SlotStream, error) {
	if r.o.StageAlong == nil {
		return nil
	}
	return func(ctx context.Context) (rollouts.SlotStream, error) {
		if r.o.InPlace != nil {
			if a := r.o.InPlace.Named(); a != "" {
				return nil, fmt.Errorf("this boot runs slot %s's Kubernetes in place", a)
			}
		}
		if u := r.state.LastUpgrade(); u != nil && u.State == nodestate.UpgradeInstalled {
			return nil, fmt.Errorf("the upgrade to %s waits for its reboot or trial in slot %s", u.To, u.ToSlot)
		}
		s, res, err := r.o.StageAlong(ctx, v, r.slot, *r.rel, policy, host.ReporterFunc(r.report))
		*begun = err == nil || res.Changed
		return s, err
	}
}

// DiskArmer arms what DiskStager staged on this machine's ESP.
func DiskArmer(esp slotinstall.ESP) Armer {
	return func(ctx context.Context, staged slotinstall.Result, report host.Reporter) (slotinstall.Result, error) {
		return slotinstall.Arm(ctx, esp, staged, report)
	}
}

// upgradeDigest identifies an upgrade file: the sha256 of its signed
// manifest (the reader accepts only its canonical form).
func upgradeDigest(m upgrade.Manifest) string {
	b, _ := m.Marshal()
	return upgrade.Digest(b)
}

// upgradeKeys are the keys the node trusts for upgrade files: those its
// slot was built to trust, and the config's keys trusted for upgrades (a
// key trusted for configs or bundles only signs no upgrade).
func (r *runner) upgradeKeys(cfg *machineconfig.Config) []signature.PublicKey {
	var keys []signature.PublicKey
	if b, err := os.ReadFile(r.o.Host.Path(layout.UpgradeKeysFile)); err == nil {
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			if line := strings.TrimSpace(s.Text()); line != "" && !strings.HasPrefix(line, "#") {
				if k, err := signature.ParsePublicKey(line); err == nil {
					keys = append(keys, k)
				} else {
					r.o.Log.Warn("unusable upgrade key", "file", layout.UpgradeKeysFile, "err", err)
				}
			}
		}
	}
	if cfg != nil {
		keys = append(keys, cfg.KeysFor(machineconfig.PurposeUpgrade)...)
	}
	return keys
}

// settleUpgrade looks at the node's last upgrade at the start of a boot.
// An upgrade installed into the other slot whose node now runs the old
// slot again fell back: every try of the new slot failed. It is reported
// rolled back with the reason the new slot's boots recorded, and marked
// bad, so that no stick installs it again on its own. What the new slot's
// Kubernetes upgrade changed on the node is put back (kubeadmflow
// RestoreBeforeUpgrade).
func (r *runner) settleUpgrade(ctx context.Context) {
	r.restoreKubernetes(ctx)
	u := r.state.LastUpgrade()
	if u == nil || u.State != nodestate.UpgradeInstalled {
		return
	}
	switch {
	case string(r.slot) == u.ToSlot:
		r.say("upgrade from %s to %s: this is its trial boot; it is kept once this boot is healthy", u.From, u.To)
		return
	case !u.InPlaceAt.IsZero() && u.InPlaceBoot == r.bootID:
		// firstboot restarted in the boot that runs it in place (or is
		// about to): not a fallback.
		r.say("upgrade from %s to %s: this boot runs its Kubernetes in place; slot %s boots at the next reboot", u.From, u.To, u.ToSlot)
		return
	case string(r.slot) != u.FromSlot:
		return
	}
	reason := r.failedBootReason(u)
	now := r.o.Host.Now().UTC()
	err := r.state.Update(func(j *nodestate.Journal) {
		j.Upgrade.State, j.Upgrade.Reason, j.Upgrade.DoneAt = nodestate.UpgradeRolledBack, reason, now
		if j.Bad(u.Digest) == nil {
			j.BadUpgrades = append(j.BadUpgrades, nodestate.BadUpgrade{Digest: u.Digest, Version: u.To, Reason: reason, At: now})
		}
	})
	if err != nil {
		r.say("recording the rolled-back upgrade: %v", err)
	}
	msg := fmt.Sprintf("upgrade to %s rolled back: %s", u.To, reason)
	r.note("upgrade", step.RolledBack, msg)
	r.say("%s; slot %s runs %s again, and this upgrade is not installed again on its own (firstboot upgrade --force)", msg, r.slot, r.rel.Version)
	r.set(func(s *status.Status) { s.Message = msg })
}

// restoreKubernetes puts back, on every boot, what a Kubernetes upgrade on
// another slot changed, when this slot's Kubernetes has a copy kept from
// before it (kubeadmflow RestoreBeforeUpgrade): after a rollback, after a
// power cut during the last restore, after an OS disk swapped back. It is
// idempotent, and a committed upgrade leaves no copy.
func (r *runner) restoreKubernetes(ctx context.Context) {
	restored, err := r.flow.RestoreBeforeUpgrade(ctx)
	switch {
	case err != nil:
		r.say("the Kubernetes files kept before an upgrade were not all restored: %v", err)
	case len(restored) > 0:
		r.say("restored the Kubernetes files an upgrade on the other slot changed: %s", strings.Join(restored, ", "))
	}
}

// failedBootReason is what the last boot of u's new slot recorded as
// failing since u was installed: a failure recorded before (a slot that
// failed in an earlier upgrade, or before it was ever upgraded) is not
// this upgrade's.
func (r *runner) failedBootReason(u *nodestate.Upgrade) string {
	reason := "the new slot never reached its health check"
	r.state.Read(func(j *nodestate.Journal) {
		for i := len(j.Boots) - 1; i >= 0; i-- {
			b := j.Boots[i]
			if b.Slot != u.ToSlot {
				continue
			}
			for k := len(b.Steps) - 1; k >= 0; k-- {
				s := b.Steps[k]
				if s.At.Before(u.InstalledAt) {
					return
				}
				if s.Result == step.Failed {
					reason = s.Name + " failed"
					if s.Detail != "" {
						reason += ": " + s.Detail
					}
					return
				}
			}
		}
	})
	return reason
}

// commitUpgrade keeps an upgrade whose trial boot is blessed.
func (r *runner) commitUpgrade() {
	u := r.state.LastUpgrade()
	if u == nil || u.State != nodestate.UpgradeInstalled || string(r.slot) != u.ToSlot {
		return
	}
	now := r.o.Host.Now().UTC()
	if err := r.state.Update(func(j *nodestate.Journal) {
		j.Upgrade.State, j.Upgrade.DoneAt = nodestate.UpgradeCommitted, now
	}); err != nil {
		r.say("recording the upgrade: %v", err)
		return
	}
	if err := r.flow.ForgetBeforeUpgrade(); err != nil {
		r.say("removing the Kubernetes files kept before the upgrade: %v", err)
	}
	r.note("upgrade", step.Committed, fmt.Sprintf("from %s to %s", u.From, u.To))
	r.say("upgraded from %s to %s: slot %s is healthy and blessed", u.From, u.To, r.slot)
}

// upgrades is the upgrade path as the upgrade stick's and the upgrade
// requests' controllers drive it.
type upgrades struct{ r *runner }

// FromMedium implements upgradestick.Installer.
func (u upgrades) FromMedium(ctx context.Context, cfg *machineconfig.Config, m media.Medium) bool {
	res := u.r.installUpgrade(ctx, cfg, upgradeSource{
		what:      "the " + layout.LabelUpgrade + " stick",
		record:    m.Label + " (" + m.Device + ")",
		removable: true,
		open:      u.r.upgradeFileOnMedium(ctx, m),
	}, upgrade.Refuse, true)
	return res.Outcome == nodestate.OutcomeInstalled
}

// FromRequest implements upgraderequests.Installer.
func (u upgrades) FromRequest(ctx context.Context, cfg *machineconfig.Config, path string, force, reboot bool) nodestate.UpgradeResult {
	policy := upgrade.Refuse
	if force {
		policy = upgrade.Force
	}
	return u.r.installUpgrade(ctx, cfg, u.r.requestSource(ctx, path), policy, reboot)
}

// Reboot implements both Installers.
func (u upgrades) Reboot(ctx context.Context) { u.r.rebootIntoUpgrade(ctx) }

// upgradeFileOnMedium opens the one upgrade file at the root of m.
func (r *runner) upgradeFileOnMedium(ctx context.Context, m media.Medium) func(fn func(path string) error) error {
	return func(fn func(path string) error) error {
		return r.o.Media.Use(ctx, m, false, func(dir string) error {
			path, err := upgradeFileOn(r.o.Host.Path(dir))
			if err != nil {
				return err
			}
			return fn(path)
		})
	}
}

// rebootIntoUpgrade reboots into the slot an upgrade was just installed in.
func (r *runner) rebootIntoUpgrade(ctx context.Context) {
	if err := r.o.Reboot(ctx); err != nil {
		r.say("reboot: %v", err)
		return
	}
	r.reboot.asked(r.o.Host.Now())
}

// upgradeSource is where an upgrade file is read from.
type upgradeSource struct {
	// what names it on the console ("the TERRA-UPGRADE stick"), record in
	// the node state.
	what, record string
	// removable: a stick, which the console says may be removed.
	removable bool
	// open calls fn with the upgrade file's path on the host; or, for
	// a rollout's file, which the node's upgrade share reads, file is
	// the file itself.
	open func(fn func(path string) error) error
	file rollouts.File
	// rollout: the cluster's rollout installs it on this node; any other
	// source on a node of a cluster hands it to the cluster's rollout.
	rollout bool
	// digest, when set, is the upgrade the source must hold (the
	// rollout's): any other signed file is refused.
	digest string
	// stage: written staged (Options.Stage), armed later (stageUpgrade).
	stage bool
	// beforeTurn: staged before the node's turn in the rollout, while the
	// API servers may be rebooting: the Kubernetes skew against them is
	// checked at the arm, and a refusal is only said.
	beforeTurn bool
}

// upgradeInput is an upgrade file as writeUpgrade reads it.
type upgradeInput struct {
	r    io.ReaderAt
	size int64
	// name names it on the console and in errors: the file's name.
	name string
	// path is the file's path on the host, beside which a force
	// instruction may lie; "" for a rollout's file.
	path string
}

// read calls fn with the upgrade file src holds.
func (src upgradeSource) read(fn func(upgradeInput) error) error {
	if src.file != nil {
		return fn(upgradeInput{r: src.file, size: src.file.Size(), name: src.file.Name()})
	}
	return src.open(func(path string) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		return fn(upgradeInput{r: f, size: fi.Size(), name: filepath.Base(path), path: path})
	})
}

// installUpgrade checks the signature and every part of the upgrade file
// src holds, then installs it into the other slot under policy and
// records it; the caller reboots into it, at once when rebooting (which
// the console says). Under upgrade.Force an upgrade marked bad on this
// node is installed again too; a force instruction beside the file
// (forceBeside) forces it.
func (r *runner) installUpgrade(ctx context.Context, cfg *machineconfig.Config, src upgradeSource, policy upgrade.Policy, rebooting bool) nodestate.UpgradeResult {
	res, digest, done := r.writeUpgrade(ctx, cfg, src, policy)
	if done != nil {
		return *done
	}
	return r.recordInstalled(src, digest, res, rebooting)
}

// stageUpgrade is installUpgrade for the cluster's rollout, in two
// steps: it writes the upgrade staged, the node still serving, and
// returns arm, which makes it the next boot and records it (its caller
// reboots). The result's outcome is nodestate.OutcomeStaged when arm is
// there to call.
func (r *runner) stageUpgrade(ctx context.Context, cfg *machineconfig.Config, src upgradeSource, policy upgrade.Policy) (arm func(context.Context) nodestate.UpgradeResult, _ nodestate.UpgradeResult) {
	src.stage = true
	staged, digest, done := r.writeUpgrade(ctx, cfg, src, policy)
	if done != nil {
		return nil, *done
	}
	detail := fmt.Sprintf("%s staged in slot %s", staged.Manifest.Version, staged.Slot)
	r.note("upgrade", step.Staged, detail)
	inPlace := r.decideInPlace(ctx, staged).InPlace
	if inPlace {
		r.say("upgrade: %s, written and checked; it runs in place on this node's turn", detail)
	} else {
		r.say("upgrade: %s, written and checked; it boots once this node is drained", detail)
	}
	arm = func(ctx context.Context) nodestate.UpgradeResult {
		if src.beforeTurn {
			if err := r.checkKubernetes(ctx, cfg, staged.Manifest, policy, true); err != nil {
				r.note("upgrade", step.Refused, err.Error())
				r.say("upgrade: the staged %s is not made the next boot: %v", staged.Manifest.Version, err)
				return nodestate.UpgradeResult{Outcome: nodestate.OutcomeRefused, Detail: err.Error()}
			}
		}
		armed, err := r.o.Arm(ctx, staged, host.ReporterFunc(r.report))
		if err != nil {
			r.note("upgrade", step.Failed, err.Error())
			r.say("upgrade: the staged %s was not made the next boot: %v", staged.Manifest.Version, err)
			return nodestate.UpgradeResult{Outcome: nodestate.OutcomeRefused, Detail: err.Error()}
		}
		if inPlace {
			return r.recordInPlace(src, digest, armed)
		}
		return r.recordInstalled(src, digest, armed, true)
	}
	return arm, nodestate.UpgradeResult{Outcome: nodestate.OutcomeStaged, Detail: detail, Version: staged.Manifest.Version, Slot: string(staged.Slot)}
}

// writeUpgrade checks the upgrade file src holds and writes it into the
// other slot under policy (staged under src.stage), and returns what it
// wrote and the upgrade's digest; or, when it wrote nothing or handed
// the upgrade to the cluster's rollout, done, the result to answer with.
func (r *runner) writeUpgrade(ctx context.Context, cfg *machineconfig.Config, src upgradeSource, policy upgrade.Policy) (_ slotinstall.Result, digest string, done *nodestate.UpgradeResult) {
	var (
		res       slotinstall.Result
		name      string
		published string
		rolling   string // the cluster rolls this upgrade out already
		// partsChecked: every part of a file a person brought was read
		// and matched the manifest (upgrade.File.Verify); a rollout's
		// file is checked as it is written (see below).
		partsChecked bool
	)
	err := src.read(func(in upgradeInput) error {
		name = in.name
		uf, err := upgrade.Open(in.r, in.size, upgrade.WithName(name))
		if err != nil {
			return err
		}
		// The signature first, which reads only the manifest. The
		// rollout's file is then checked part by part as it is written:
		// each part was checked against the signed manifest as a control
		// plane copied it from a stick into its share, and again by its
		// digest as this node fetched it from there; a second
		// whole pass over it (5 to 6 minutes under emulation) would
		// check nothing that the install does not before the slot can
		// boot (its kernel and initramfs hashed as they are copied, its
		// root filesystem read back and hashed).
		if src.rollout {
			r.say("upgrade: %s on %s: checking its signature; every part is checked as it is written", name, src.what)
		}
		keys := r.upgradeKeys(cfg)
		v, err := uf.VerifySignature(keys)
		if err != nil {
			return err
		}
		digest = upgradeDigest(v.Manifest())
		if src.digest != "" && digest != src.digest {
			return fmt.Errorf("%s holds the upgrade %s (%s), not the one asked for (%s)", src.what, v.Manifest().Version, digest, src.digest)
		}
		// A force instruction beside the file (a rollout's comes with
		// the rollout) forces it.
		var force string
		if !src.rollout {
			if force, err = r.forceBeside(cfg, in.path, digest, v.Manifest().Version); err != nil {
				return err
			}
			if force != "" {
				policy = upgrade.Force
			}
			// What the signed manifest alone answers, without reading
			// the parts: the rollout of this upgrade goes on already;
			// or this node runs its version, and either takes part in
			// no rollout or cannot read the cluster's record now (early
			// in its trial boot, say) to tell whether a stopped
			// rollout of it is to start again (the stick inserted again
			// later does that).
			msg, rollingNow, recordErr := r.rollouts.RollingOut(ctx, cfg, digest)
			if rollingNow {
				rolling = msg
				return nil
			}
			if err := upgrade.Check(*r.rel, v.Manifest(), policy); errors.Is(err, upgrade.ErrAlreadyInstalled) &&
				(!r.rollouts.InRollout(cfg) || recordErr != nil) {
				return err
			}
			if !r.rollouts.InRollout(cfg) {
				r.say("upgrade: %s on %s: checking its signature and every part before anything is written", name, src.what)
				if v, err = uf.Verify(ctx, keys); err != nil {
					return err
				}
				partsChecked = true
			}
		}
		var bad *nodestate.BadUpgrade
		r.state.Read(func(j *nodestate.Journal) {
			if b := j.Bad(digest); b != nil {
				c := *b
				bad = &c
			}
		})
		if bad != nil && policy != upgrade.Force {
			return fmt.Errorf("%w: %s rolled back at %s (%s)", rollouts.ErrRolledBackBefore, bad.Version, bad.At.Format("2006-01-02T15:04:05Z"), bad.Reason)
		}
		if b := r.rollouts.ClusterBad(ctx, cfg, digest); b != nil && policy != upgrade.Force {
			return fmt.Errorf("%w: %s rolled back on %s at %s (%s)", rollouts.ErrBadInCluster, b.Version, b.Node, b.At.Format("2006-01-02T15:04:05Z"), b.Reason)
		}
		if err := r.checkKubernetes(ctx, cfg, v.Manifest(), policy, !src.beforeTurn); err != nil {
			return err
		}
		if r.rollouts.InRollout(cfg) && !src.rollout {
			// The stick is read once: each part is checked as it is
			// copied into the share, which keeps the parts only if
			// every one matched; the cluster's record names them once
			// every part but the root filesystem did, which the peers
			// fetch as it is copied (rollouts.Publish).
			manifest, sig := uf.SignedManifest()
			signed := rollout.Instructions{Manifest: string(manifest), ManifestSignature: string(sig), Force: force}
			var along bool // the other slot written from the same reads
			published, err = r.rollouts.Publish(ctx, cfg, rollouts.Upgrade{File: v, Manifest: v.Manifest(), Digest: digest, Signed: signed, Policy: policy,
				Slot: r.slotAlong(v, policy, &along)})
			if err != nil && along {
				// Said as an install that failed while it wrote the slot.
				res = slotinstall.Result{Slot: r.slot.Other(), Manifest: v.Manifest(), Changed: true}
			}
			if !errors.Is(err, rollouts.ErrClusterUnreachable) || policy != upgrade.Force {
				return err
			}
			// Forced, with the cluster out of reach: this node alone.
			r.say("upgrade: %v; forced: installing on this node alone", err)
			published = ""
		}
		if !src.rollout && !partsChecked {
			r.say("upgrade: %s on %s: checking every part before anything is written", name, src.what)
			if v, err = uf.Verify(ctx, keys); err != nil {
				return err
			}
		}
		if r.o.InPlace != nil {
			if a := r.o.InPlace.Named(); a != "" {
				// Its programs run from that slot, mounted: the slot
				// cannot be written under them.
				return fmt.Errorf("this boot runs slot %s's Kubernetes in place, and the next upgrade goes into that slot: reboot this node first (it then boots slot %s), and bring the upgrade again", a, a)
			}
		}
		install := r.o.Install
		if src.stage {
			install = r.o.Stage
		}
		res, err = install(ctx, v, r.slot, *r.rel, policy, host.ReporterFunc(r.report))
		return err
	})
	switch {
	case errors.Is(err, upgrade.ErrAlreadyInstalled):
		detail := name + " is already installed; nothing to do"
		if src.removable {
			detail += " (the stick may be removed)"
		}
		r.say("upgrade: %s", detail)
		return res, digest, &nodestate.UpgradeResult{Outcome: nodestate.OutcomeAlreadyInstalled, Detail: detail}
	case err == nil && rolling != "":
		// Nothing was published: no step to record.
		r.say("upgrade: %s", rolling)
		return res, digest, &nodestate.UpgradeResult{Outcome: nodestate.OutcomePublished, Detail: rolling}
	case err == nil && published != "":
		r.note("upgrade", step.Published, published)
		r.say("upgrade: %s", published)
		r.publish()
		return res, digest, &nodestate.UpgradeResult{Outcome: nodestate.OutcomePublished, Detail: published}
	case err != nil && res.Changed:
		r.note("upgrade", step.Failed, err.Error())
		again := ""
		if src.beforeTurn {
			again = "; its turn writes it again"
		}
		r.say("upgrade failed while slot %s was written: %v; slot %s has no boot entry, and this node boots slot %s as before%s", res.Slot, err, res.Slot, r.slot, again)
		r.set(func(s *status.Status) { s.Message = "upgrade failed: " + err.Error() })
		r.publish()
		return res, digest, &nodestate.UpgradeResult{Outcome: nodestate.OutcomeFailed, Detail: err.Error()}
	case err != nil && src.beforeTurn:
		// The turn tries again and reports what it finds then.
		r.note("upgrade", step.Skipped, "before this node's turn: "+err.Error())
		return res, digest, &nodestate.UpgradeResult{Outcome: nodestate.OutcomeRefused, Detail: err.Error()}
	case err != nil:
		r.note("upgrade", step.Refused, err.Error())
		r.say("upgrade refused, nothing was written: %v", err)
		r.set(func(s *status.Status) { s.Message = "upgrade refused: " + err.Error() })
		r.publish()
		return res, digest, &nodestate.UpgradeResult{Outcome: nodestate.OutcomeRefused, Detail: err.Error()}
	}
	return res, digest, nil
}

// recordInstalled records an upgrade written into the other slot and
// made its next boot, and says so; the caller reboots into it, at once
// when rebooting.
// recordInPlace records an upgrade armed to run in place: its slot boots
// on trial at the node's next reboot, as after recordInstalled, and until
// then this boot runs its Kubernetes (ApplyInPlace).
func (r *runner) recordInPlace(src upgradeSource, digest string, res slotinstall.Result) nodestate.UpgradeResult {
	u := r.installedRecord(src, digest, res)
	u.InPlaceAt, u.InPlaceBoot = u.InstalledAt, r.bootID
	if err := r.state.Update(func(j *nodestate.Journal) { j.Upgrade = u }); err != nil {
		// Armed all the same: ApplyInPlace finds no record and the
		// turn reboots into the slot instead.
		r.say("recording the upgrade: %v", err)
	}
	r.note("upgrade", step.Installed, fmt.Sprintf("%s into slot %s, to run in place", res.Manifest.Version, res.Slot))
	next := fmt.Sprintf("its Kubernetes runs in place now, and slot %s boots at this node's next reboot (on trial, then back to %s)", res.Slot, r.rel.Version)
	r.say("upgrade: %s installed into slot %s; %s", res.Manifest.Version, res.Slot, next)
	r.publish()
	return nodestate.UpgradeResult{Outcome: nodestate.OutcomeInstalled, Detail: next, Version: res.Manifest.Version, Slot: string(res.Slot)}
}

// installedRecord is the journal's record of the upgrade res installed
// from src.
func (r *runner) installedRecord(src upgradeSource, digest string, res slotinstall.Result) *nodestate.Upgrade {
	return &nodestate.Upgrade{Digest: digest, From: r.rel.Version, To: res.Manifest.Version, FromSlot: string(r.slot), ToSlot: string(res.Slot),
		Source: src.record, State: nodestate.UpgradeInstalled, InstalledAt: r.o.Host.Now().UTC()}
}

func (r *runner) recordInstalled(src upgradeSource, digest string, res slotinstall.Result, rebooting bool) nodestate.UpgradeResult {
	u := r.installedRecord(src, digest, res)
	if err := r.state.Update(func(j *nodestate.Journal) { j.Upgrade = u }); err != nil {
		r.say("recording the upgrade: %v", err)
	}
	r.note("upgrade", step.Installed, fmt.Sprintf("%s into slot %s", res.Manifest.Version, res.Slot))
	tries := fmt.Sprintf("%d tries", res.Tries)
	if res.Tries == 1 {
		tries = "1 try"
	}
	next := fmt.Sprintf("rebooting into it (on trial: %s, then back to %s)", tries, r.rel.Version)
	if !rebooting {
		next = fmt.Sprintf("the next boot tries it (%s, then back to %s)", tries, r.rel.Version)
	}
	r.say("upgrade: %s installed into slot %s in %s; %s", res.Manifest.Version, res.Slot, res.Took.Round(1e9), next)
	r.publish()
	return nodestate.UpgradeResult{Outcome: nodestate.OutcomeInstalled, Detail: next, Version: res.Manifest.Version, Slot: string(res.Slot)}
}

// checkKubernetes refuses an upgrade whose Kubernetes this node cannot
// move to (upgrade.CheckKubernetes): it compares the upgrade's Kubernetes
// with the slot's own and, on a node of a cluster and with apiServers,
// with what every control plane's API server runs. When the Kubernetes
// changes and an API server does not answer, the skew cannot be checked
// and the upgrade is refused, unless forced.
func (r *runner) checkKubernetes(ctx context.Context, cfg *machineconfig.Config, m upgrade.Manifest, policy upgrade.Policy, apiServers bool) error {
	if m.KubernetesVersion == "" || r.flow == nil {
		return nil
	}
	running, err := r.flow.KubernetesVersion()
	if err != nil || running == m.KubernetesVersion {
		return nil // a slot without Kubernetes, or the OS alone changes
	}
	skew := upgrade.KubernetesSkew{Running: running}
	if cfg.Cluster != nil && apiServers {
		skew.ControlPlane = cfg.Cluster.IsControlPlane()
		vs, err := r.flow.APIServerVersions(ctx, cfg.Cluster.APIBackends())
		if err != nil && policy != upgrade.Force {
			return fmt.Errorf("the upgrade carries Kubernetes %s and this node runs %s, but the version skew cannot be checked: %w "+
				"(force the upgrade to install it anyway)", m.KubernetesVersion, running, err)
		}
		skew.APIServers = vs
	}
	return upgrade.CheckKubernetes(skew, m.KubernetesVersion)
}

// errForceRefused: the force instruction beside an upgrade file does not
// hold.
var errForceRefused = errors.New("the force instruction beside the upgrade file is refused")

// forceBeside reads the force instruction beside the upgrade file at
// path (path+upgrade.InstructionSuffix), if there is one, and checks it:
// signed by a key this node trusts for upgrades, about this upgrade
// (digest, version), not expired on this node's clock. It returns the
// instruction's file, "" when there is none; one that does not hold
// refuses the upgrade (errForceRefused).
func (r *runner) forceBeside(cfg *machineconfig.Config, path, digest, version string) (string, error) {
	name := path + upgrade.InstructionSuffix
	b, err := readSmall(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w: %w", errForceRefused, err)
	}
	base := filepath.Base(name)
	in, key, err := upgrade.VerifyInstruction(b, r.upgradeKeys(cfg))
	if err == nil {
		err = in.Check(digest, version, r.o.Host.Now())
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", errForceRefused, base, err)
	}
	r.say("upgrade: %s forces it: %s, signed by key %s", base, in, key.ID())
	return string(b), nil
}

// errNoUpgradeFile: a stick without exactly one upgrade file.
var errNoUpgradeFile = errors.New("the stick must hold exactly one upgrade file (terrarium-VERSION.upgrade) at its root")

// upgradeFileOn finds the one upgrade file at the root of dir.
func upgradeFileOn(dir string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.upgrade"))
	if err != nil {
		return "", err
	}
	sort.Strings(matches)
	if len(matches) != 1 {
		names := make([]string, len(matches))
		for i, m := range matches {
			names[i] = filepath.Base(m)
		}
		return "", fmt.Errorf("%w; found %d: %s", errNoUpgradeFile, len(matches), strings.Join(names, ", "))
	}
	return matches[0], nil
}
