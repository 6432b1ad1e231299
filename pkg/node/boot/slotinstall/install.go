package slotinstall

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/authenticode"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

// reportStep is the step name of Install's reports.
const reportStep = "upgrade"

// progressEvery is the least time between two progress reports.
const progressEvery = 2 * time.Second

// Options are Install's inputs. All are required but Policy (the zero
// value is upgrade.Refuse) and Tries.
type Options struct {
	// Upgrade is the upgrade file, verified (upgrade.File.Verify) against
	// the keys the node trusts.
	Upgrade *upgrade.Verified
	// Running is the slot this boot runs (terrarium.slot on the kernel
	// command line). Install writes the other one.
	Running layout.Slot
	// Installed is the running slot's release (release.json).
	Installed release.Release
	// Policy is upgrade.Refuse for an upgrade the node found on its own,
	// upgrade.Force for one an operator installs by hand.
	Policy upgrade.Policy
	// Devices opens the target slot's partition.
	Devices SlotDevices
	// ESP mounts the EFI system partition.
	ESP ESP
	// Reporter hears the progress: step "upgrade", results step.Checked,
	// step.Writing, step.Installed (step.Staged under Stage).
	Reporter host.Reporter
	// Clock times the install and paces the progress reports.
	Clock host.Clock
	// Tries is the new entry's boot counter, 1 to 9: how many boots may
	// fail before systemd-boot falls back. 0 takes the initial count of a
	// counted slot entry on the ESP, or else DefaultTries.
	Tries int
	// FirmwareDB returns the certificates the firmware's Secure Boot db
	// holds. On a node that boots signed UKIs Install checks the new
	// slot's against them before it writes anything; nil refuses such an
	// install.
	FirmwareDB func() ([]*x509.Certificate, error)
	// Stage writes the slot whole but leaves its entry staged, under a
	// name no boot loader reads: the running slot stays the one booted
	// until Arm commits the entry. A node of a cluster stages an upgrade
	// while it still serves, and arms it once drained.
	Stage bool
}

func (o *Options) validate() error {
	var missing []string
	for _, f := range []struct {
		name  string
		unset bool
	}{
		{"Upgrade", o.Upgrade == nil}, {"Devices", o.Devices == nil}, {"ESP", o.ESP == nil},
		{"Reporter", o.Reporter == nil}, {"Clock", o.Clock == nil},
	} {
		if f.unset {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("slotinstall: options %v are not set", missing)
	}
	if !o.Running.Valid() {
		return fmt.Errorf("slotinstall: running slot %q is not a or b", o.Running)
	}
	if o.Tries < 0 || o.Tries > maxTries {
		return fmt.Errorf("slotinstall: tries %d; use 1 to %d, or 0 for the image's", o.Tries, maxTries)
	}
	return nil
}

// Result says what Install wrote (or, with upgrade.ErrAlreadyInstalled,
// found): for firstboot to record and report.
type Result struct {
	// Slot is the slot installed, the one that was not running.
	Slot layout.Slot
	// Manifest is the upgrade's verified manifest.
	Manifest upgrade.Manifest
	// Device is the partition the rootfs went to (empty when nothing was
	// written).
	Device string
	// Entry is the ESP path of the slot's boot entry
	// (loader/entries/terrarium-b+3.conf).
	Entry string
	// SortKey is the entry's sort-key, which puts it before the running
	// slot's.
	SortKey string
	// Tries is the entry's boot counter.
	Tries int
	// Files are the ESP paths written, the entry last.
	Files []string
	// Took is how long Install took.
	Took time.Duration
	// Staged: the slot is written and its entry staged (Options.Stage),
	// for Arm; the next boot is still the running slot's.
	Staged bool
	// Changed: Install began to change the target slot (its boot
	// entries removed, then its partition and its ESP files written).
	// When Install fails after that, the slot holds neither what it held
	// nor the upgrade, and has no boot entry; the running slot boots as
	// before.
	Changed bool
}

// Install writes the upgrade into the slot that is not running and makes
// systemd-boot try it at the next boot, falling back to the running slot
// when its tries run out; under Options.Stage it leaves the slot staged
// for Arm. See the package documentation for the order of its writes and
// what a power cut leaves. It refuses what upgrade.Check refuses under
// Options.Policy, and with the errors of this package. When the target
// slot already holds this upgrade, complete and not failed, it writes
// nothing and returns an error wrapping upgrade.ErrAlreadyInstalled with
// the Result of what it found; when it holds it staged, Stage writes
// nothing and Install only commits it (Arm).
func Install(ctx context.Context, o Options) (Result, error) {
	return install(ctx, o, ops{})
}

// install is Install with its file system calls made through w, which
// tests replace.
func install(ctx context.Context, o Options, w ops) (Result, error) {
	if err := o.validate(); err != nil {
		return Result{}, err
	}
	in := &installer{o: o, w: w, m: o.Upgrade.Manifest(), target: o.Running.Other(), start: o.Clock.Now()}
	return in.run(ctx)
}

// installer is one run of Install.
type installer struct {
	o      Options
	w      ops
	m      upgrade.Manifest
	target layout.Slot
	start  time.Time

	rootfs, kernel, initrd upgrade.PartInfo
	// uki is the target slot's signed UKI (a Secure Boot build's), and
	// hasUKI whether the upgrade has one.
	uki    upgrade.PartInfo
	hasUKI bool
	// signedBoot: the running slot boots a signed UKI, and so will the
	// new one.
	signedBoot bool
	res        Result
}

// plan is what the checks decided.
type plan struct {
	state   espState
	entry   entry
	file    string // the entry's file name
	tries   int
	already *entryFile // the target's entry of this very upgrade
	// alreadyStaged: already is a staged entry (Stage wrote the upgrade
	// and Arm has not committed it).
	alreadyStaged bool
}

func (in *installer) run(ctx context.Context) (Result, error) {
	p, err := in.prepare(ctx)
	if err != nil {
		return in.res, err
	}
	if p.already != nil {
		return in.found(ctx, p)
	}
	dev, err := in.begin(ctx, p)
	if err != nil {
		return in.res, err
	}
	defer dev.Close()
	if err := in.writeRootfs(ctx, dev); err != nil {
		return in.res, fmt.Errorf("upgrade to %s: %w", in.m.Version, err)
	}
	return in.finish(ctx, p)
}

// prepare checks the upgrade against the running release and the ESP,
// and decides what to write (or finds the target holding it already).
func (in *installer) prepare(ctx context.Context) (plan, error) {
	in.res = Result{Slot: in.target, Manifest: in.m}
	if err := upgrade.Check(in.o.Installed, in.m, in.o.Policy); err != nil {
		return plan{}, err
	}
	if err := in.parts(); err != nil {
		return plan{}, err
	}
	return in.plan(ctx)
}

// found answers for a target that holds the upgrade already: staged
// (committed, unless staging again) or installed.
func (in *installer) found(ctx context.Context, p plan) (Result, error) {
	a := p.already
	in.res.Entry, in.res.SortKey, in.res.Tries, in.res.Staged = a.path(), a.sortKey, a.name.tries(), p.alreadyStaged
	switch {
	case p.alreadyStaged && in.o.Stage:
		in.o.Reporter.Report(reportStep, step.Checked, fmt.Sprintf("%s is staged in slot %s already", in.m.Version, in.target))
		return in.res, nil
	case p.alreadyStaged:
		// Installed whole but for the commit: Install commits it.
		return arm(ctx, in.o.ESP, in.res, in.o.Reporter, in.w)
	}
	state := "blessed"
	if a.name.counted {
		state = fmt.Sprintf("on trial, %d of %d tries left: it boots next", a.name.left, a.name.tries())
	}
	return in.res, fmt.Errorf("upgrade to %s: slot %s holds it (%s, %s): %w", in.m.Version, in.target, a.name.file, state, upgrade.ErrAlreadyInstalled)
}

// begin opens the target's partition, checks that the rootfs fits, and
// makes the target unbootable while it is written. The caller closes the
// partition.
func (in *installer) begin(ctx context.Context, p plan) (SlotDevice, error) {
	dev, err := in.o.Devices.OpenSlot(ctx, in.target)
	if err != nil {
		return nil, fmt.Errorf("upgrade to %s: %w", in.m.Version, err)
	}
	if err := in.checkSize(dev); err != nil {
		_ = dev.Close()
		return nil, err
	}
	in.o.Reporter.Report(reportStep, step.Checked, fmt.Sprintf("%s over %s: writing slot %s (%s)", in.m.Version, in.o.Installed.Version, in.target, dev.Name()))
	if err := in.o.ESP.WithESP(true, func(dir string) error { return in.unbootable(dir, p.state) }); err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("upgrade to %s: make slot %s unbootable while it is written: %w", in.m.Version, in.target, err)
	}
	return dev, nil
}

// finish writes the ESP's files and the entry, once the rootfs is
// written and checked, and reports the slot installed (or staged).
func (in *installer) finish(ctx context.Context, p plan) (Result, error) {
	in.o.Reporter.Report(reportStep, step.Writing, in.espWhat()+" and boot entry")
	if err := in.o.ESP.WithESP(true, func(dir string) error { return in.writeESP(ctx, dir, p) }); err != nil {
		return in.res, fmt.Errorf("upgrade to %s: %w", in.m.Version, err)
	}
	in.res.Took = in.o.Clock.Now().Sub(in.start)
	if in.o.Stage {
		in.res.Staged = true
		in.o.Reporter.Report(reportStep, step.Staged, fmt.Sprintf("%s in slot %s, which boots once armed, in %s",
			in.m.Version, in.target, in.res.Took.Round(time.Second)))
		return in.res, nil
	}
	in.o.Reporter.Report(reportStep, step.Installed, fmt.Sprintf("%s in slot %s, tried at the next boot (%d tries), in %s",
		in.m.Version, in.target, in.res.Tries, in.res.Took.Round(time.Second)))
	return in.res, nil
}

// espWhat names what goes to the ESP, for a report.
func (in *installer) espWhat() string {
	if in.signedBoot {
		return "signed unified kernel image"
	}
	return "kernel, initramfs"
}

// parts finds the manifest's parts by role (a valid manifest has each).
func (in *installer) parts() error {
	var ok [3]bool
	in.rootfs, ok[0] = in.m.PartByRole(upgrade.RoleRootfs)
	in.kernel, ok[1] = in.m.PartByRole(upgrade.RoleKernel)
	in.initrd, ok[2] = in.m.PartByRole(upgrade.RoleInitramfs)
	if !ok[0] || !ok[1] || !ok[2] {
		return fmt.Errorf("upgrade to %s: the manifest lacks a part of roles %v", in.m.Version, upgrade.Roles())
	}
	in.uki, in.hasUKI = in.m.PartByRole(upgrade.UKIRole(string(in.target)))
	return nil
}

// plan reads the ESP and decides what to write, or that nothing is to be
// written.
func (in *installer) plan(ctx context.Context) (plan, error) {
	var p plan
	err := in.o.ESP.WithESP(false, func(dir string) error {
		st, err := readESP(dir, in.o.Running, in.w.free)
		if err != nil {
			return err
		}
		p.state = st
		in.signedBoot = len(st.running) == 1 && st.running[0].efi != ""
		if p.already, p.alreadyStaged, err = in.holds(ctx, dir, st); err != nil || p.already != nil {
			return err
		}
		return in.decide(ctx, &p)
	})
	if err != nil {
		return plan{}, fmt.Errorf("upgrade to %s: %w", in.m.Version, err)
	}
	return p, nil
}

// decide checks the running entry, the boot order and the ESP's room, and
// fills in the new entry.
func (in *installer) decide(ctx context.Context, p *plan) error {
	st := p.state
	if len(st.running) != 1 {
		return fmt.Errorf("slot %s (running) has %d entries in %s: %w", in.o.Running, len(st.running), layout.ESPEntriesDir, ErrNoRunningEntry)
	}
	running := st.running[0]
	if running.name.counted {
		return fmt.Errorf("slot %s's entry %s: %w", in.o.Running, running.name.file, ErrRunningOnTrial)
	}
	if in.signedBoot {
		if err := in.checkUKI(ctx, running); err != nil {
			return err
		}
	}
	if err := checkLoaderDefault(st.loaderConf); err != nil {
		return err
	}
	key, err := nextSortKey(running.sortKey)
	if err != nil {
		return fmt.Errorf("%s: %w", running.path(), err)
	}
	var parts []upgrade.PartInfo
	for _, f := range in.espFiles() {
		parts = append(parts, f.part)
	}
	if err := st.checkSpace(parts...); err != nil {
		return err
	}
	p.tries = in.tries(st)
	p.file = in.target.EntryFile(p.tries)
	p.entry = newEntry(in.target, in.m.Version, key, slotCmdline(running.options), in.rootfs.SHA256)
	if in.signedBoot {
		p.entry = newUKIEntry(in.target, in.m.Version, key, in.rootfs.SHA256)
	}
	in.res.Entry, in.res.SortKey, in.res.Tries = layout.ESPEntriesDir+"/"+p.file, key, p.tries
	if in.o.Stage {
		in.res.Entry += stagedSuffix
	}
	return nil
}

// tries is the new entry's boot counter.
func (in *installer) tries(st espState) int {
	if in.o.Tries > 0 {
		return in.o.Tries
	}
	for _, n := range st.counted {
		if t := n.tries(); t >= 1 && t <= maxTries {
			return t
		}
	}
	return DefaultTries
}

// holds returns the target's entry when the target slot holds this very
// upgrade, complete (its entry records the rootfs's hash, and the kernel
// and initramfs on the ESP match) and not failed, and refuses an upgrade
// that failed there before; staged reports that the entry is a staged
// one. Under Force it finds only a staged entry: an operator's install
// writes the slot again.
func (in *installer) holds(ctx context.Context, dir string, st espState) (e *entryFile, staged bool, err error) {
	lists := []struct {
		entries []entryFile
		staged  bool
	}{{st.target, false}, {st.staged, true}}
	if in.o.Policy == upgrade.Force {
		// An operator's install writes again; a staged slot, which no
		// boot tried yet, is kept (a forced rollout's turn, resumed).
		lists = lists[1:]
	}
	for _, list := range lists {
		for i := range list.entries {
			e := &list.entries[i]
			if e.version != in.m.Version || e.rootfsSHA256 != in.rootfs.SHA256 {
				continue
			}
			complete, err := in.filesMatch(ctx, dir)
			if err != nil || !complete {
				return nil, false, err
			}
			if e.name.bad() {
				return nil, false, fmt.Errorf("slot %s's entry %s: %w", in.target, e.name.file, ErrFailedBefore)
			}
			return e, list.staged, nil
		}
	}
	return nil, false, nil
}

// espFile is a part that goes to the ESP, and its ESP path.
type espFile struct {
	path string
	part upgrade.PartInfo
}

// espFiles are the target's kernel and initramfs, or on a node that boots
// signed UKIs the target's UKI.
func (in *installer) espFiles() []espFile {
	if in.signedBoot {
		return []espFile{{in.target.UKIPath(), in.uki}}
	}
	return []espFile{{in.target.KernelPath(), in.kernel}, {in.target.InitrdPath(), in.initrd}}
}

// maxUKISize bounds the UKI checkUKI reads into memory (a kernel and an
// initramfs are some tens of MiB).
const maxUKISize = 256 << 20

// checkUKI checks, on a node that boots signed UKIs, that the upgrade
// carries the target slot's and that it is signed by a certificate the
// firmware's db holds: what the firmware would refuse is never installed.
func (in *installer) checkUKI(ctx context.Context, running entryFile) error {
	if !in.hasUKI {
		return fmt.Errorf("slot %s's entry %s starts %s: %w", in.o.Running, running.name.file, running.efi, ErrNeedsSignedUKI)
	}
	if in.o.FirmwareDB == nil {
		return fmt.Errorf("slot %s's UKI %s: the firmware's db is not readable here: %w", in.target, in.uki.Name, ErrUntrustedUKI)
	}
	if in.uki.Size > maxUKISize {
		return fmt.Errorf("slot %s's UKI %s has %d MiB, more than a UKI's %d: %w", in.target, in.uki.Name, mib(in.uki.Size), maxUKISize>>20, ErrUntrustedUKI)
	}
	certs, err := in.o.FirmwareDB()
	if err != nil {
		return fmt.Errorf("read the firmware's Secure Boot db: %w", err)
	}
	var b bytes.Buffer
	if err := in.o.Upgrade.CopyPart(ctx, &b, in.uki.Name); err != nil {
		return fmt.Errorf("read slot %s's UKI %s: %w", in.target, in.uki.Name, err)
	}
	signer, err := authenticode.Verify(b.Bytes(), certs)
	if err != nil {
		return fmt.Errorf("slot %s's UKI %s (db holds %s): %w: %w", in.target, in.uki.Name, subjects(certs), err, ErrUntrustedUKI)
	}
	in.o.Reporter.Report(reportStep, step.Checked, fmt.Sprintf("slot %s's UKI is signed by %s, which the firmware's db holds", in.target, signer.Subject.CommonName))
	return nil
}

// subjects names certificates by their common names, for a message.
func subjects(certs []*x509.Certificate) string {
	if len(certs) == 0 {
		return "no certificate"
	}
	var names []string
	for _, c := range certs {
		names = append(names, c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}

// filesMatch reports whether the target's kernel and initramfs on the ESP
// are the upgrade's.
func (in *installer) filesMatch(ctx context.Context, dir string) (bool, error) {
	for _, f := range in.espFiles() {
		sum, err := fileSHA256(ctx, espPath(dir, f.path))
		if err != nil || sum != f.part.SHA256 {
			return false, ctx.Err()
		}
	}
	return true, nil
}

// checkSize checks that the rootfs fits the target's partition.
func (in *installer) checkSize(dev SlotDevice) error {
	size, err := dev.Size()
	if err != nil {
		return fmt.Errorf("upgrade to %s: %w", in.m.Version, err)
	}
	if in.rootfs.Size > size {
		return fmt.Errorf("upgrade to %s: its rootfs has %d bytes (%d MiB) and slot %s's partition %s has %d (%d MiB): %w",
			in.m.Version, in.rootfs.Size, mib(in.rootfs.Size), in.target, dev.Name(), size, size>>20, ErrSlotTooSmall)
	}
	return nil
}
