package firstboot

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotinstall"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// fakeInstaller records what it was asked to install.
type fakeInstaller struct {
	mu       sync.Mutex
	versions []string
	// other is the version the other slot holds already, if any.
	other string
	// armed are the versions armed after staging.
	armed []string
	// attempts counts the installs begun, written or not.
	attempts int
}

// install copies every part through CopyPart, as the real installer
// does, and fails on the first that differs from the manifest.
func (f *fakeInstaller) install(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	m := v.Manifest()
	if m.Version == installed.Version || m.Version == f.other {
		return slotinstall.Result{}, upgrade.ErrAlreadyInstalled
	}
	// The target slot's entries go before its parts are copied.
	changed := slotinstall.Result{Slot: running.Other(), Manifest: m, Changed: true}
	for _, p := range m.Parts {
		if err := v.CopyPart(ctx, io.Discard, p.Name); err != nil {
			return changed, err
		}
	}
	f.versions = append(f.versions, m.Version)
	return slotinstall.Result{Slot: running.Other(), Manifest: m, Tries: 3}, nil
}

// stage is install, staged.
func (f *fakeInstaller) stage(ctx context.Context, v *upgrade.Verified, running layout.Slot, installed release.Release, policy upgrade.Policy, report host.Reporter) (slotinstall.Result, error) {
	res, err := f.install(ctx, v, running, installed, policy, report)
	res.Staged = err == nil
	return res, err
}

// arm arms what stage staged.
func (f *fakeInstaller) arm(_ context.Context, staged slotinstall.Result, _ host.Reporter) (slotinstall.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !staged.Staged {
		return staged, slotinstall.ErrNotStaged
	}
	f.armed = append(f.armed, staged.Manifest.Version)
	staged.Staged = false
	return staged, nil
}

func (f *fakeInstaller) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.versions...)
}

// upgradeStick writes a signed upgrade file of version to dir on the env's
// root.
func (e *env) upgradeStick(key ed25519.PrivateKey, dir, version string) {
	e.t.Helper()
	e.upgradeStickKube(key, dir, version, "")
}

// upgradeStickKube writes a signed upgrade file of version carrying
// Kubernetes kube ("" for none) to dir on the env's root.
func (e *env) upgradeStickKube(key ed25519.PrivateKey, dir, version, kube string) {
	e.t.Helper()
	e.mkdir(dir)
	parts := []upgrade.Part{}
	for _, p := range []struct {
		name string
		role upgrade.Role
	}{{"rootfs.squashfs", upgrade.RoleRootfs}, {"vmlinuz", upgrade.RoleKernel}, {"initrd.img", upgrade.RoleInitramfs}} {
		src := e.path(filepath.Join("/build", version, p.name))
		require.NoError(e.t, os.MkdirAll(filepath.Dir(src), 0o755))
		require.NoError(e.t, os.WriteFile(src, []byte(p.name+" of "+version), 0o644))
		parts = append(parts, upgrade.FilePart(p.name, p.role, src))
	}
	f, err := os.Create(e.path(filepath.Join(dir, "terrarium-"+version+".upgrade")))
	require.NoError(e.t, err)
	defer f.Close()
	_, err = upgrade.Write(context.Background(), f, upgrade.Manifest{FormatVersion: upgrade.FormatVersion, Version: version,
		Compatible: "terrarium", MinFromVersion: "0.0.0", BuiltAt: "2026-01-01T00:00:00Z", KubernetesVersion: kube}, parts, key)
	require.NoError(e.t, err)
}

// upgradeEnv is an enrolled node whose slot trusts key for upgrade files,
// with a fake installer.
func upgradeEnv(t *testing.T) (e *env, o Options, inst *fakeInstaller, key ed25519.PrivateKey) {
	t.Helper()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	e = enrolled(t, fullConfig)
	e.write(layout.UpgradeKeysFile, pub.String()+"\n")
	inst = &fakeInstaller{}
	o = e.optionsWith(noStick())
	o.Install = inst.install
	return e, o, inst, key
}

// runWatching runs firstboot with the watch loop on until stop says so.
func (e *env) runWatching(t *testing.T, o Options, stop func() bool) {
	t.Helper()
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	require.Eventually(t, stop, 15*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

func stepsSay(e *env, want string) func() bool {
	return func() bool { return strings.Contains(strings.Join(stepResults(e.lastBoot()), " "), want) }
}

// An upgrade stick signed by a key the slot trusts is installed into the
// other slot and the node reboots into it; the same stick again, after
// the reboot into the new version, does nothing; a file signed by another
// key, or one that rolled back before, is refused before anything is
// written.
func TestUpgradeStick(t *testing.T) {
	e, o, inst, key := upgradeEnv(t)
	other, _, err := signature.GenerateKey()
	require.NoError(t, err)

	// Signed by a key the node does not trust: refused, nothing written.
	e.upgradeStick(other, "/stick-other", "1.3.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick-other")
	e.runWatching(t, o, stepsSay(e, "upgrade=refused"))
	assert.Empty(t, inst.calls())
	assert.Zero(t, e.reboots)
	assert.Contains(t, e.console.String(), "upgrade refused, nothing was written")
	e.media.remove(layout.LabelUpgradeFAT)

	// Trusted: installed, recorded, rebooted into.
	e.console.Reset()
	e.upgradeStick(key, "/stick", "1.3.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	e.runWatching(t, o, stepsSay(e, "upgrade=installed"))
	assert.Equal(t, []string{"1.3.0"}, inst.calls())
	assert.Equal(t, 1, e.reboots)
	u := e.journal().Upgrade
	require.NotNil(t, u)
	assert.Equal(t, nodestate.Upgrade{Digest: u.Digest, From: "1.2.3", To: "1.3.0", FromSlot: "a", ToSlot: "b", Source: "TERRA-UPGRA (/dev/sdc1)",
		State: nodestate.UpgradeInstalled, InstalledAt: u.InstalledAt}, *u)
	assert.True(t, strings.HasPrefix(u.Digest, "sha256:"))
	assert.Contains(t, e.console.String(), "upgrade: 1.3.0 installed into slot b")
}

// A node that comes back in its old slot after an upgrade was installed
// reports it rolled back, with the reason the new slot recorded, marks it
// bad and refuses the same file on a stick; a trial boot of the new slot
// that is blessed commits the upgrade.
func TestUpgradeRollbackAndCommit(t *testing.T) {
	e, o, inst, key := upgradeEnv(t)
	e.upgradeStick(key, "/stick", "1.3.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	e.runWatching(t, o, stepsSay(e, "upgrade=installed"))
	digest := e.journal().Upgrade.Digest

	// The new slot boots and fails its health check (recorded in the
	// shared journal), three times; systemd-boot falls back to slot a.
	store, err := e.state().OpenJournal()
	require.NoError(t, err)
	require.NoError(t, store.Update(func(j *nodestate.Journal) {
		rec := j.Current("bbbbbbbb-0000-0000-0000-000000000001", "b")
		rec.Steps = append(rec.Steps, nodestate.StepRecord{Name: "health", Result: "failed", Detail: "health check failed: this build carries the injected fault \"health\"", At: time.Now()})
	}))
	e.setBootID("33333333-3333-3333-3333-333333333333")
	e.console.Reset()
	e.runWatching(t, o, stepsSay(e, "upgrade=refused"))
	j := e.journal()
	require.NotNil(t, j.Upgrade)
	assert.Equal(t, nodestate.UpgradeRolledBack, j.Upgrade.State)
	assert.Contains(t, j.Upgrade.Reason, "injected fault")
	require.NotNil(t, j.Bad(digest))
	assert.Contains(t, e.console.String(), "upgrade to 1.3.0 rolled back: health failed: health check failed")
	assert.Contains(t, e.console.String(), "rolled back on this node before")
	assert.Equal(t, []string{"1.3.0"}, inst.calls(), "not installed again")

	// A good upgrade: installed, then its trial boot in slot b is
	// blessed, and the upgrade is committed.
	e.media.remove(layout.LabelUpgradeFAT)
	e.upgradeStick(key, "/stick2", "1.4.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdd1", "/stick2")
	e.runWatching(t, o, stepsSay(e, "upgrade=installed"))
	e.media.remove(layout.LabelUpgradeFAT)
	e.setBootID("44444444-4444-4444-4444-444444444444")
	e.write("/proc/cmdline", "BOOT_IMAGE=/terrarium/b/vmlinuz root=PARTLABEL=TERRA-B ro terrarium.slot=b quiet\n")
	e.setReleaseVersion("1.4.0")
	e.console.Reset()
	require.NoError(t, e.run(fullConfig))
	assert.Equal(t, nodestate.UpgradeCommitted, e.journal().Upgrade.State)
	assert.Contains(t, e.console.String(), "upgraded from 1.2.3 to 1.4.0: slot b is healthy and blessed")
}

// `firstboot upgrade FILE` asks the running node, which checks and
// installs the file as it would from a stick and answers: refused (by an
// untrusted key) with nothing written; installed without a reboot when
// asked so; installed and rebooted into; and an upgrade that rolled back
// here before only with --force.
func TestUpgradeRequest(t *testing.T) {
	e, o, inst, key := upgradeEnv(t)
	other, _, err := signature.GenerateKey()
	require.NoError(t, err)
	e.upgradeStick(other, "/home/admin/untrusted", "1.3.0")
	e.upgradeStick(key, "/home/admin", "1.3.0")
	e.upgradeStick(key, "/home/admin", "1.4.0")
	e.upgradeStick(key, "/home/admin", "1.5.0")
	store, err := e.state().OpenJournal()
	require.NoError(t, err)
	require.NoError(t, store.Update(func(j *nodestate.Journal) {
		j.BadUpgrades = append(j.BadUpgrades, nodestate.BadUpgrade{Digest: digestOfFile(t, e.path("/home/admin/terrarium-1.5.0.upgrade")), Version: "1.5.0", Reason: "health failed", At: time.Now()})
	}))

	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	require.Eventually(t, func() bool { s := e.statusIfAny(); return s != nil && s.State == status.StateVerified }, 10*time.Second, time.Millisecond)

	ask := func(path string, force, noReboot bool) (nodestate.UpgradeResult, string, error) {
		var out strings.Builder
		res, err := RequestUpgrade(ctx, UpgradeOptions{Host: o.Host, Out: &out, Path: path, Force: force, NoReboot: noReboot, Wait: 10 * time.Second, Poll: time.Millisecond})
		return res, out.String(), err
	}
	_, _, err = ask("/home/admin/untrusted/terrarium-1.3.0.upgrade", false, false)
	assert.ErrorIs(t, err, ErrUpgradeRefused)
	assert.ErrorContains(t, err, "not trusted")
	assert.Empty(t, inst.calls(), "nothing written")

	res, out, err := ask("/home/admin/terrarium-1.3.0.upgrade", false, true)
	require.NoError(t, err)
	assert.Equal(t, nodestate.UpgradeResult{ID: res.ID, Outcome: "installed", Detail: res.Detail, Version: "1.3.0", Slot: "b"}, res)
	assert.Contains(t, out, "1.3.0 installed into slot b; the next boot tries it")
	assert.Zero(t, e.rebootCount(), "--no-reboot")

	_, _, err = ask("/home/admin/terrarium-1.5.0.upgrade", false, true)
	assert.ErrorIs(t, err, ErrUpgradeRefused)
	assert.ErrorContains(t, err, "rolled back on this node before")
	_, _, err = ask("/home/admin/terrarium-1.5.0.upgrade", true, true)
	require.NoError(t, err, "--force installs it all the same")

	res, _, err = ask("/home/admin/terrarium-1.4.0.upgrade", false, false)
	require.NoError(t, err)
	assert.Equal(t, "installed", res.Outcome)
	assert.Equal(t, []string{"1.3.0", "1.5.0", "1.4.0"}, inst.calls())
	require.Eventually(t, func() bool { return e.rebootCount() == 1 }, 5*time.Second, time.Millisecond, "rebooted into it")
	assert.Equal(t, "firstboot upgrade /home/admin/terrarium-1.4.0.upgrade", e.journal().Upgrade.Source)
	assert.NoFileExists(t, e.path(nodestate.UpgradeRequestFile.String()), "the request is taken")

	_, _, err = ask("/home/admin/missing.upgrade", false, false)
	assert.ErrorContains(t, err, "no such file", "refused by the command, nothing asked")
	cancel()
	require.NoError(t, <-done)
}

// digestOfFile is the digest the node records for an upgrade file.
func digestOfFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	uf, err := upgrade.Open(f, fi.Size())
	require.NoError(t, err)
	return upgradeDigest(uf.Manifest())
}

// rebootCount is how often the node rebooted, read under the env's lock.
func (e *env) rebootCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reboots
}

// A worker refuses an upgrade whose Kubernetes is newer than its control
// plane's API server (kubelets are never newer than the API servers), and
// one it cannot check because the API server does not answer; it takes
// the same file once the control plane runs that Kubernetes. An upgrade
// of the OS alone needs no API server. Each refusal names the versions.
func TestUpgradeKubernetesSkew(t *testing.T) {
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	e, _ := clusterEnv(t, "")
	require.NoError(t, e.run(clusterConfig(t, "w-1")), e.console.String())
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	e.write(layout.UpgradeKeysFile, pub.String()+"\n")
	inst := &fakeInstaller{}
	o := e.optionsWith(noStick())
	o.Install = inst.install
	const cp = "10.77.0.10:6443"

	steps := []struct {
		name    string
		kube    string
		api     string // the control plane's answer; "" does not answer
		outcome string
		says    string
	}{
		{"control plane behind", "v1.37.0", "v1.36.3", "refused", "this node is a worker, and API servers run v1.36.3: the cluster's API servers are behind: upgrade the control planes first"},
		{"control plane silent", "v1.37.0", "", "refused", "the version skew cannot be checked: the API server at 10.77.0.10:6443: connection refused"},
		{"a Kubernetes downgrade", "v1.36.2", "v1.36.3", "refused", "carries Kubernetes v1.36.2 and this node runs v1.36.3"},
		{"the OS alone, control plane silent", "v1.36.3", "", "installed", "upgrade: 1.3.0 installed into slot b"},
	}
	for i, st := range steps {
		e.console.Reset()
		boot := fmt.Sprintf("33333333-3333-3333-3333-%012d", i) // a boot of its own: its own steps
		e.setBootID(boot)
		e.apiVersions = map[string]string{cp: st.api}
		dir := fmt.Sprintf("/stick-%d", i)
		e.upgradeStickKube(key, dir, "1.3.0", st.kube)
		e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", dir)
		said := stepsSay(e, "upgrade="+st.outcome)
		e.runWatching(t, o, func() bool { return e.lastBoot().BootID == boot && said() })
		assert.Contains(t, e.console.String(), st.says, st.name)
		e.media.remove(layout.LabelUpgradeFAT)
		if st.outcome == "refused" {
			assert.Empty(t, inst.calls(), "%s: nothing installed", st.name)
		}
	}
	assert.Equal(t, []string{"1.3.0"}, inst.calls())
}

// A slot that failed before this upgrade was installed into it (an older
// upgrade's trial) does not give this one's rollback its reason.
func TestRollbackReasonIsThisUpgrades(t *testing.T) {
	e, o, _, key := upgradeEnv(t)
	store, err := e.state().OpenJournal()
	require.NoError(t, err)
	require.NoError(t, store.Update(func(j *nodestate.Journal) {
		rec := j.Current("bbbbbbbb-0000-0000-0000-0000000000aa", "b")
		rec.Steps = append(rec.Steps, nodestate.StepRecord{Name: "health", Result: "failed", Detail: "an older build's fault", At: e.now()})
	}))
	e.upgradeStick(key, "/stick", "1.3.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	e.runWatching(t, o, stepsSay(e, "upgrade=installed"))
	e.media.remove(layout.LabelUpgradeFAT)

	// Slot b's tries are spent in the initramfs, before firstboot
	// records anything; the node is back in slot a.
	e.setBootID("55555555-5555-5555-5555-555555555555")
	e.console.Reset()
	require.NoError(t, e.run(fullConfig))
	j := e.journal()
	require.NotNil(t, j.Upgrade)
	assert.Equal(t, nodestate.UpgradeRolledBack, j.Upgrade.State)
	assert.Equal(t, "the new slot never reached its health check", j.Upgrade.Reason)
	assert.NotContains(t, e.console.String(), "an older build's fault")
}

// A rollout's file is checked by its signature, then part by part as it
// is written: a corrupt part fails the write, which says which part and
// that the other slot was partly written, and nothing is staged. A
// stick's file is read whole before anything is written: the same
// corruption is refused before the installer starts.
func TestRolloutStageChecksPartsAsItWrites(t *testing.T) {
	for _, tt := range []struct {
		name     string
		rollout  bool
		says     string
		attempts int
		outcome  string
		then     string
	}{
		{"rollout", true, "checking its signature; every part is checked as it is written", 1,
			nodestate.OutcomeFailed, "upgrade failed while slot b was written: "},
		{"stick", false, "checking its signature and every part before anything is written", 0,
			nodestate.OutcomeRefused, "upgrade refused, nothing was written: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, o, inst, key := upgradeEnv(t)
			o.Stage = inst.stage
			e.upgradeStick(key, "/share", "1.3.0")
			path := e.path("/share/terrarium-1.3.0.upgrade")
			damagePart(t, path, "vmlinuz of 1.3.0")
			r, err := newRunner(o)
			require.NoError(t, err)
			cfg, err := machineconfig.Parse("machine.yaml", []byte(fullConfig))
			require.NoError(t, err)

			arm, res := r.stageUpgrade(context.Background(), cfg, upgradeSource{
				what: "the test's file", rollout: tt.rollout,
				open: func(fn func(string) error) error { return fn(path) },
			}, upgrade.Refuse)

			assert.Nil(t, arm, "nothing to arm")
			assert.Equal(t, tt.outcome, res.Outcome)
			assert.Contains(t, res.Detail, "member vmlinuz: sha256 ")
			assert.Contains(t, e.console.String(), tt.says)
			assert.Contains(t, e.console.String(), tt.then)
			assert.Equal(t, tt.attempts, inst.attempts)
			assert.Empty(t, inst.calls(), "nothing staged")
			assert.Nil(t, e.journal().Upgrade, "nothing recorded that boots")
		})
	}
}

// damagePart flips a byte of the named part's content in the upgrade
// file at path: a whole read of the file refuses it.
func damagePart(t *testing.T, path, content string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	at := bytes.Index(data, []byte(content))
	require.Positive(t, at, "%s in %s", content, path)
	data[at] ^= 1
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// A stick of the version a standalone node runs is answered from its
// signed manifest: already installed, its parts never read (one of them
// is damaged, which a whole read would refuse).
func TestStickOfTheRunningVersionIsNotReadWhole(t *testing.T) {
	e, o, inst, key := upgradeEnv(t)
	e.upgradeStick(key, "/stick", "1.2.3")
	damagePart(t, e.path("/stick/terrarium-1.2.3.upgrade"), "rootfs.squashfs of 1.2.3")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	e.runWatching(t, o, func() bool { return strings.Contains(e.console.String(), "is already installed") })

	assert.Contains(t, e.console.String(), "upgrade: terrarium-1.2.3.upgrade is already installed; nothing to do (the stick may be removed)")
	assert.NotContains(t, e.console.String(), "every part")
	assert.NotContains(t, e.console.String(), "the manifest says", "no part was read whole")
	assert.Zero(t, inst.attempts, "the installer never started")
}
