//go:build e2e

package qemutests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// TestSecureBootUpgrade: a node that enrolled its site's Secure Boot keys
// and boots signed UKIs refuses, with nothing written, an upgrade whose
// UKIs another site's key signed (its firmware would refuse them), then
// takes one its site signed from a TERRA-UPGRADE stick: it checks the new
// slot's UKI against the firmware's db, writes it, reboots into it under
// Secure Boot and blesses it. The machine has a TPM: its TERRA-STATE,
// encrypted under the enrolled keys, opens in the new slot without a
// recovery key (the new UKIs' signer is the one PCR 7 recorded).
func TestSecureBootUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	work := t.TempDir()
	keyBase := upgradeKey(ctx, t, work)
	site := filepath.Join(work, "site-keys")
	_, err := secureboot.Generate(site, "qemu-site")
	require.NoError(t, err)
	stranger := filepath.Join(work, "stranger-keys")
	_, err = secureboot.Generate(stranger, "stranger")
	require.NoError(t, err)

	overlay, changed := changedOverlay(ctx, t, work)

	start := time.Now()
	buildUpgrade(ctx, t, upgradeBuild{Version: "0.1.0", Overlay: overlay, Key: keyBase + ".key", SecureBootKeys: site}, filepath.Join(work, "0.1.0"))
	good := buildUpgrade(ctx, t, upgradeBuild{Version: "0.2.0", Overlay: changed, Key: keyBase + ".key", SecureBootKeys: site}, filepath.Join(work, "0.2.0"))
	foreign := buildUpgrade(ctx, t, upgradeBuild{Version: "0.2.0", Overlay: changed, Key: keyBase + ".key", SecureBootKeys: stranger}, filepath.Join(work, "0.2.0-stranger"))
	t.Logf("three Secure Boot builds in %s", time.Since(start).Round(time.Second))
	sticks := map[string]string{
		"foreign": upgradeStick(ctx, t, "TERRA-UPGRADE", foreign, filepath.Join(work, "foreign.img")),
		"good":    upgradeStick(ctx, t, "TERRA-UPGRADE", good, filepath.Join(work, "good.img")),
	}
	const step = 15 * time.Minute // the longest: a reboot into a new slot under TCG

	key := newSSHKey(t)
	m := newMachine(t, filepath.Join(work, "0.1.0", "terrarium.qcow2"))
	m.secureBoot = true
	m.tpm = true
	sshPort := m.forwardSSH()
	vm := bootForUpgrades(ctx, t, m, key, "sb-node", step)
	assert.Contains(t, vm.Console(), "Custom Secure Boot keys successfully enrolled", "systemd-boot enrolled the site's keys")
	assert.Contains(t, vm.Console(), "terrarium: Secure Boot: on")
	assert.Contains(t, vm.Console(), "terrarium: TERRA-STATE: encrypted")
	plug := stickPlugger(ctx, t, func() *qemu.VM { return vm }, sticks)
	plug("foreign")
	// The whole line: the console may hold only its start when first read.
	refused := expectWithin(ctx, t, vm, step, `upgrade refused, nothing was written: ([^\n]*)\n`)
	assert.Contains(t, refused[1], "firmware trusts", "the refusal names the firmware's db")
	assert.Contains(t, refused[1], "O=stranger", "the refusal names the UKI's signer")
	t.Logf("refused: %s", refused[1])
	require.NoError(t, vm.UnplugDisk(ctx, "foreign"))

	start = time.Now()
	plug("good")
	expectWithin(ctx, t, vm, step, `slot b's UKI is signed by qemu-site Secure Boot db`)
	expectWithin(ctx, t, vm, step, `upgrade: 0\.2\.0 installed into slot b`)
	expectWithin(ctx, t, vm, step, `terrarium-init: opened encrypted TERRA-STATE /dev/vda\d+ with the key this machine's TPM unsealed`)
	expectWithin(ctx, t, vm, step, `Terrarium 0\.2\.0, slot b, boot \d+`)
	expectWithin(ctx, t, vm, step, `terrarium: Secure Boot: on`)
	expectWithin(ctx, t, vm, step, `upgraded from 0\.1\.0 to 0\.2\.0: slot b is healthy and blessed`)
	t.Logf("upgraded under Secure Boot %s after the stick went in", time.Since(start).Round(time.Second))
	ssh := dialSSH(ctx, t, sshPort, key)
	got, err := ssh.read("cat /usr/share/terrarium-test/changed")
	require.NoError(t, err)
	assert.Equal(t, "0.2.0", strings.TrimSpace(got), "the changed file")
	cmdline, err := ssh.read("cat /proc/cmdline")
	require.NoError(t, err)
	assert.Contains(t, cmdline, "terrarium.slot=b", "the UKI's own command line")
}
