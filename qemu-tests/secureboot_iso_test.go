//go:build e2e

package qemutests

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// TestSecureBootISOInstall: a Secure Boot build's ISO on a USB stick, on a
// machine with a TPM whose firmware (OVMF's Secure Boot build) is in setup
// mode. systemd-boot on the ISO enrolls the site's keys and resets; the
// live system — one signed UKI — boots under Secure Boot and installs
// onto the empty disk as its config's install section says, its
// TERRA-STATE sealed by the TPM; the installed disk boots under Secure
// Boot, the TPM unsealing that key, and provisions, enrolled with the
// config.
func TestSecureBootISOInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+3*bootTimeout)
	defer cancel()
	keys := filepath.Join(t.TempDir(), "keys")
	ks, err := secureboot.Generate(keys, "qemu-site")
	require.NoError(t, err)
	out := t.TempDir()
	start := time.Now()
	man := buildSpec(ctx, t, secureBootSpecWith(t, keys, "[iso]"), out)
	t.Logf("built the Secure Boot ISO in %s", time.Since(start).Round(time.Second))
	require.NotNil(t, man.SecureBoot)
	require.NotNil(t, man.SecureBoot.LiveUKI, "the manifest names the live UKI")

	m := newLiveMachine(t, filepath.Join(out, "terrarium-sb.iso"), qemu.BusUSB)
	m.secureBoot, m.tpm = true, true
	key := newSSHKey(t)
	config := adminConfig("installed", key.authorized, "install:\n  disk:\n    minSize: 4GiB\n")
	m.fwCfg = []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: write(t, m.dir, "machine.yaml", config)}}

	start = time.Now()
	vm := m.boot(ctx)
	expect(ctx, t, vm, `Custom Secure Boot keys successfully enrolled, rebooting the system now!`)
	expect(ctx, t, vm, `terrarium-init: boot medium /dev/sd[a-z]+ \(ISO 9660 volume `)
	expect(ctx, t, vm, `terrarium: Secure Boot: on \(the firmware ran only boot files its db allows\)`)
	expect(ctx, t, vm, `installed Terrarium \S+ onto /dev/vda .* rebooting into it`)
	t.Logf("enrolled %s's keys, booted live under Secure Boot and installed %s after power-on", ks.Site, time.Since(start).Round(time.Second))

	expect(ctx, t, vm, `terrarium-init: boot disk /dev/vda,`)
	// The installer made the installed disk's TERRA-STATE, sealed by
	// this machine's TPM under the enrolled keys.
	expect(ctx, t, vm, `terrarium-init: opened encrypted TERRA-STATE /dev/vda\d+ with the key this machine's TPM unsealed`)
	expect(ctx, t, vm, `terrarium: Secure Boot: on`)
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	assert.Equal(t, "installed", s.Hostname)
	assert.Equal(t, "on", s.SecureBoot)
	assert.Equal(t, "tpm", s.StateEncryption)
	assert.Equal(t, "a", s.Slot)
	t.Logf("the installed disk provisioned under Secure Boot %s after power-on", time.Since(start).Round(time.Second))
	require.NoError(t, vm.Quit(ctx))
}
