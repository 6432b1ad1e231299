//go:build e2e

package qemutests

import (
	"context"
	"crypto/ed25519"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// upgradeBuild is one build of testdata/upgrade.yaml.tmpl.
type upgradeBuild struct {
	Version, Overlay, Faults, Key string
	// SecureBootKeys, if set, signs the build for Secure Boot with the
	// key set in that directory.
	SecureBootKeys string
}

// buildUpgrade builds b into out and returns the path of its upgrade file.
func buildUpgrade(ctx context.Context, t *testing.T, b upgradeBuild, out string) string {
	t.Helper()
	tmpl, err := template.ParseFiles("testdata/upgrade.yaml.tmpl")
	require.NoError(t, err)
	spec := filepath.Join(out, "spec.yaml")
	require.NoError(t, os.MkdirAll(out, 0o755))
	f, err := os.Create(spec)
	require.NoError(t, err)
	require.NoError(t, tmpl.Execute(f, b))
	require.NoError(t, f.Close())
	buildSpec(ctx, t, spec, out)
	return filepath.Join(out, "terrarium-"+b.Version+".upgrade")
}

// upgradeStick makes a FAT32 stick labelled label (cut to FAT's 11
// characters) holding file: a node mounts only FAT, exFAT or ISO 9660
// from a stick (pkg/node/config/media).
func upgradeStick(ctx context.Context, t *testing.T, label, file, img string) string {
	t.Helper()
	fi, err := os.Stat(file)
	require.NoError(t, err)
	kib := (fi.Size()>>20 + 64) << 10
	out, err := exec.CommandContext(ctx, "mkfs.fat", "-C", "-F", "32", "-n", label[:min(len(label), 11)], img, strconv.FormatInt(kib, 10)).CombinedOutput()
	require.NoError(t, err, "mkfs.fat: %s", out)
	out, err = exec.CommandContext(ctx, "mcopy", "-i", img, file, "::").CombinedOutput()
	require.NoError(t, err, "mcopy: %s", out)
	return img
}

// upgradeKey makes the builds' upgrade signing key in work and returns
// its base name (BASE.key, BASE.pub).
func upgradeKey(ctx context.Context, t *testing.T, work string) string {
	t.Helper()
	keyBase := filepath.Join(work, "build")
	out, err := exec.CommandContext(ctx, filepath.Join(fixture(t, "TERRARIUM_BIN"), "imagebuild"), "config", "keygen", "-o", keyBase).CombinedOutput()
	require.NoError(t, err, "keygen: %s", out)
	return keyBase
}

// changedOverlay returns the image's overlay and, in work, a copy of it
// with one file added that 0.2.0 carries.
func changedOverlay(ctx context.Context, t *testing.T, work string) (overlay, changed string) {
	t.Helper()
	overlay, err := filepath.Abs("../os/overlay")
	require.NoError(t, err)
	changed = filepath.Join(work, "overlay-0.2.0")
	require.NoError(t, exec.CommandContext(ctx, "cp", "-a", overlay, changed).Run())
	require.NoError(t, os.MkdirAll(filepath.Join(changed, "usr/share/terrarium-test"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(changed, "usr/share/terrarium-test/changed"), []byte("0.2.0\n"), 0o644))
	return overlay, changed
}

// bootForUpgrades boots m, an image of 0.1.0, with an admin config for
// hostname and waits until it is provisioned and watches for sticks.
func bootForUpgrades(ctx context.Context, t *testing.T, m *machine, key sshKey, hostname string, step time.Duration) *qemu.VM {
	t.Helper()
	vm := m.boot(ctx, configAttached(m.configDisk("config.img", adminConfig(hostname, key.authorized, ""))))
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	require.Equal(t, "0.1.0", s.Version)
	expectWithin(ctx, t, vm, step, `watching for signed config changes`)
	return vm
}

// stickPlugger returns what inserts sticks[id] into the running VM (vm
// returns it: a test boots the machine again): a read-only USB stick.
func stickPlugger(ctx context.Context, t *testing.T, vm func() *qemu.VM, sticks map[string]string) func(id string) {
	return func(id string) {
		t.Helper()
		require.NoError(t, vm().HotplugDisk(ctx, qemu.Disk{ID: id, Path: sticks[id], Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}))
	}
}

// resigned rewrites an upgrade file's parts, signed by key: a file the
// node cannot trust.
func resigned(ctx context.Context, t *testing.T, src, dst string, trusted signature.PublicKey, key ed25519.PrivateKey) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	fi, err := in.Stat()
	require.NoError(t, err)
	uf, err := upgrade.Open(in, fi.Size())
	require.NoError(t, err)
	v, err := uf.Verify(ctx, []signature.PublicKey{trusted})
	require.NoError(t, err)
	m := v.Manifest()
	dir := t.TempDir()
	var parts []upgrade.Part
	for _, p := range m.Parts {
		f, err := os.Create(filepath.Join(dir, p.Name))
		require.NoError(t, err)
		require.NoError(t, v.CopyPart(ctx, f, p.Name))
		require.NoError(t, f.Close())
		parts = append(parts, upgrade.FilePart(p.Name, p.Role, filepath.Join(dir, p.Name)))
	}
	m.Parts = nil
	out, err := os.Create(dst)
	require.NoError(t, err)
	_, err = upgrade.Write(ctx, out, m, parts, key)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// flipped copies src to dst with one byte of its rootfs flipped.
func flipped(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x40 // inside the rootfs, the first and largest part
	require.NoError(t, os.WriteFile(dst, b, 0o644))
}

// TestUpgradeFromStick: a node of version 0.1.0 refuses an upgrade file
// with one flipped byte and one signed by a key it does not trust, before
// writing anything; upgrades to 0.2.0 (one changed file) with `firstboot
// upgrade DEVICE` over SSH, boots the other slot and blesses it; survives a
// power cut while it writes 0.2.1 (its old version boots); and 0.2.1, whose
// health check fails, falls back after its tries, is reported rolled back
// and marked bad, and is not installed again from the stick still in.
// All of it under OVMF, and again under SeaBIOS, where GRUB tries the
// slot an upgrade names in its environment block.
func TestUpgradeFromStick(t *testing.T) {
	t.Run("UEFI", func(t *testing.T) { upgradeFromStick(t, false) })
	t.Run("BIOS", func(t *testing.T) { upgradeFromStick(t, true) })
}

func upgradeFromStick(t *testing.T, bios bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	work := t.TempDir()
	keyBase := upgradeKey(ctx, t, work)
	priv, err := signature.LoadPrivateKey(keyBase + ".key")
	require.NoError(t, err)
	pub := signature.PublicKeyOf(priv)
	overlay, changed := changedOverlay(ctx, t, work)

	start := time.Now()
	buildUpgrade(ctx, t, upgradeBuild{Version: "0.1.0", Overlay: overlay, Key: keyBase + ".key"}, filepath.Join(work, "0.1.0"))
	v020 := buildUpgrade(ctx, t, upgradeBuild{Version: "0.2.0", Overlay: changed, Key: keyBase + ".key"}, filepath.Join(work, "0.2.0"))
	v021 := buildUpgrade(ctx, t, upgradeBuild{Version: "0.2.1", Overlay: changed, Faults: "health", Key: keyBase + ".key"}, filepath.Join(work, "0.2.1"))
	t.Logf("three builds in %s", time.Since(start).Round(time.Second))
	fi, err := os.Stat(v020)
	require.NoError(t, err)
	t.Logf("upgrade file %s: %d MiB", filepath.Base(v020), fi.Size()>>20)

	other, _, err := signature.GenerateKey()
	require.NoError(t, err)
	untrusted := filepath.Join(work, "untrusted", "terrarium-0.2.0.upgrade")
	require.NoError(t, os.MkdirAll(filepath.Dir(untrusted), 0o755))
	resigned(ctx, t, v020, untrusted, pub, other)
	bad := filepath.Join(work, "flipped", "terrarium-0.2.0.upgrade")
	require.NoError(t, os.MkdirAll(filepath.Dir(bad), 0o755))
	flipped(t, v020, bad)

	// The sticks are made before the machine boots, so that one is pulled
	// and the next put in at once: the node sees another stick under the
	// same device name, with no look in between that finds none.
	sticks := map[string]string{}
	for id, file := range map[string]string{"flipped": bad, "untrusted": untrusted, "v021": v021, "v021b": v021} {
		sticks[id] = upgradeStick(ctx, t, "TERRA-UPGRADE", file, filepath.Join(work, id+".img"))
	}
	// 0.2.0 comes on a disk that is no upgrade stick, for `firstboot
	// upgrade DEVICE`.
	sticks["v020"] = upgradeStick(ctx, t, "FILES", v020, filepath.Join(work, "v020.img"))
	const step = 15 * time.Minute // the longest: a reboot into a new slot under TCG

	key := newSSHKey(t)
	m := newMachine(t, filepath.Join(work, "0.1.0", "terrarium.qcow2"))
	m.bios = bios
	sshPort := m.forwardSSH()
	vm := bootForUpgrades(ctx, t, m, key, "upgrade-node", step)
	plug := stickPlugger(ctx, t, func() *qemu.VM { return vm }, sticks)
	plug("flipped")
	expectWithin(ctx, t, vm, step, `upgrade refused, nothing was written: .*sha256`)
	require.NoError(t, vm.UnplugDisk(ctx, "flipped"))
	plug("untrusted")
	expectWithin(ctx, t, vm, step, `upgrade refused, nothing was written: .*(unknown|trust)`)
	require.NoError(t, vm.UnplugDisk(ctx, "untrusted"))

	// 0.2.0: an operator runs `firstboot upgrade DEVICE` over SSH with
	// --no-reboot, then reboots; the node boots the other slot and
	// blesses it.
	plug("v020")
	ssh := dialSSH(ctx, t, sshPort, key)
	// Into a file, then read without sudo's pty, which now and then loses
	// a command's output (see sshClient.output).
	_, runErr := ssh.try("sudo udevadm wait --timeout=120 /dev/disk/by-label/FILES && sudo sh -c 'firstboot upgrade --no-reboot /dev/disk/by-label/FILES > /tmp/upgrade.txt 2>&1'")
	asked, err := ssh.read("cat /tmp/upgrade.txt")
	require.NoError(t, err)
	require.NoError(t, runErr, "firstboot upgrade: %s", asked)
	t.Logf("firstboot upgrade: %s", lastLine(asked))
	require.Contains(t, asked, "0.2.0 installed into slot b; the next boot tries it")
	expectWithin(ctx, t, vm, step, `upgrade: 0\.2\.0 installed into slot b`)
	ssh.run("sudo systemd-run --on-active=1s /usr/bin/systemctl reboot")
	expectWithin(ctx, t, vm, step, `Terrarium 0\.2\.0, slot b, boot \d+`)
	expectWithin(ctx, t, vm, step, `upgraded from 0\.1\.0 to 0\.2\.0: slot b is healthy and blessed`)
	ssh = dialSSH(ctx, t, sshPort, key)
	got, err := ssh.read("cat /usr/share/terrarium-test/changed")
	require.NoError(t, err)
	assert.Equal(t, "0.2.0", strings.TrimSpace(got), "the changed file")
	require.NoError(t, vm.UnplugDisk(ctx, "v020"))

	// 0.2.1: the power is cut while it is written; 0.2.0 boots again.
	plug("v021")
	expectWithin(ctx, t, vm, step, `upgrade: writing: rootfs \d+%`)
	cutPower(ctx, t, vm)
	vm = m.boot(ctx)
	s := expectStatus(ctx, t, vm, "verified", "failed")
	assert.Equal(t, "0.2.0", s.Version, "the old version boots after a cut during the write")
	assert.Equal(t, "b", s.Slot)

	// Again, whole: 0.2.1 fails its health check on every try, the node
	// falls back to 0.2.0 and marks 0.2.1 bad.
	expectWithin(ctx, t, vm, step, `watching for signed config changes`)
	plug("v021b")
	// One try: the running 0.2.0's boot.tries (its release.json), which
	// no counted entry on the ESP supplies any more (both are blessed).
	expectWithin(ctx, t, vm, step, `upgrade: 0\.2\.1 installed into slot a in [^;]*; rebooting into it \(on trial: 1 try, then back to 0\.2\.0\)`)
	expectWithin(ctx, t, vm, step, `Terrarium 0\.2\.1, slot a`)
	rolled := expectWithin(ctx, t, vm, step, `upgrade to 0\.2\.1 rolled back: ([^;\n]*); slot b runs 0\.2\.0 again`)
	t.Logf("rolled back: %s", rolled[1])
	assert.Contains(t, rolled[1], "injected fault")
	// The stick is still in: the boot that found the rollback refuses it
	// from the mark it persisted in the node's journal (which the next
	// boots read, as pkg/node/firstboot's TestUpgradeRollbackAndCommit
	// shows).
	expectWithin(ctx, t, vm, step, `upgrade refused, nothing was written: this upgrade was rolled back on this node before`)
	s = expectStatus(ctx, t, vm, "verified", "failed")
	assert.Equal(t, "0.2.0", s.Version)
	tail := vm.Console()
	if i := strings.LastIndex(tail, "Terrarium 0.2.0, slot b"); i >= 0 {
		assert.NotRegexp(t, regexp.MustCompile(`upgrade: 0\.2\.1 installed`), tail[i:], "not installed again")
	}
}
