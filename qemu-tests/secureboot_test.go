package qemutests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// secureBootSpec is the default image signed with the key set in keys:
// both slots hold the build, one boot try each, a qcow2.
func secureBootSpec(t *testing.T, keys string) string {
	t.Helper()
	return secureBootSpecWith(t, keys, "[qcow2]")
}

// secureBootSpecWith is secureBootSpec with the outputs given (YAML).
func secureBootSpecWith(t *testing.T, keys, outputs string) string {
	t.Helper()
	base, err := filepath.Abs("../os/terrarium.yaml")
	require.NoError(t, err)
	spec := filepath.Join(t.TempDir(), "secureboot.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`apiVersion: terrarium.dev/v1alpha1
kind: BuildSpec
extends: `+base+`
name: terrarium-sb
boot:
  tries: 1
slotB:
  mode: copy
outputs: `+outputs+`
upgrade: {}
secureBoot:
  keys: `+keys+`
`), 0o644))
	return spec
}

// TestSecureBoot: an image signed with a site's own keys, booted by OVMF's
// Secure Boot firmware in setup mode, enrolls the site's keys by itself
// (systemd-boot's secure-boot-enroll) and then boots under Secure Boot to
// provisioned; the node says so. (That two builds of it are the same is
// TestSecureBootReproducible's, in make e2e-node.) Then, on a second machine with the same
// enrolled firmware, slot A's unified kernel image has one byte of its
// command line changed (terrarium.slot=a made =b, as someone editing the
// kernel's arguments on the disk would): the firmware refuses to run it,
// the entry's one try is spent, and after a reset systemd-boot falls back
// to slot B, which boots under Secure Boot and is blessed.
func TestSecureBoot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*bootTimeout)
	defer cancel()
	keys := filepath.Join(t.TempDir(), "keys")
	ks, err := secureboot.Generate(keys, "qemu-site")
	require.NoError(t, err)
	out := t.TempDir()
	spec := secureBootSpec(t, keys)
	start := time.Now()
	buildSpec(ctx, t, spec, out)
	t.Logf("built the Secure Boot image in %s", time.Since(start).Round(time.Second))
	image := filepath.Join(out, "terrarium-sb.qcow2")

	first := newMachine(t, image)
	first.secureBoot = true
	var enrolledVars string
	t.Run("enroll and boot", func(t *testing.T) {
		start := time.Now()
		vm := first.boot(ctx, configAttached(first.configDisk("config.img", goodConfig)))
		expect(ctx, t, vm, `Custom Secure Boot keys successfully enrolled, rebooting the system now!`)
		expect(ctx, t, vm, `terrarium: Terrarium 0\.1\.0, slot a, boot 1`)
		expect(ctx, t, vm, `terrarium: Secure Boot: on \(the firmware ran only boot files its db allows\)`)
		s := expectStatus(ctx, t, vm, "provisioned", "failed")
		require.Equal(t, "provisioned", s.State, "%+v", s)
		assert.Equal(t, "on", s.SecureBoot)
		assert.Equal(t, "a", s.Slot)
		assert.Equal(t, "blessed", s.Blessed)
		t.Logf("enrolled %s's keys and provisioned under Secure Boot %s after power-on", ks.Site, time.Since(start).Round(time.Second))
		require.NoError(t, vm.Quit(ctx))
		enrolledVars = filepath.Join(vm.Dir(), qemu.VarsFile)
	})
	require.NotEmpty(t, enrolledVars, "the first machine enrolled no keys")

	t.Run("altered UKI falls back", func(t *testing.T) {
		m := newMachine(t, image)
		m.secureBoot = true
		// The same firmware state: the site's keys enrolled, Secure Boot on.
		require.NoError(t, os.MkdirAll(filepath.Join(m.dir, "vm"), 0o755))
		copyFile(t, enrolledVars, filepath.Join(m.dir, "vm", qemu.VarsFile))
		at := m.espOffsetOf([]byte(layout.CmdlineSlot + "=a"))
		at += int64(len(layout.CmdlineSlot + "="))
		b, err := exec.Command("qemu-io", "-f", "qcow2", "-c", fmt.Sprintf("write -P 0x62 %d 1", at), m.disk).CombinedOutput()
		require.NoError(t, err, "qemu-io: %s", b)

		start := time.Now()
		vm := m.boot(ctx, configAttached(m.configDisk("config.img", goodConfig)))
		refused := expect(ctx, t, vm, `Error loading \\terrarium\\a\\terrarium\.efi: Access denied`)
		t.Logf("the firmware refused the altered UKI %s after power-on: %q", time.Since(start).Round(time.Second), refused[0])
		// systemd-boot 257 hands the failure back to the firmware, which
		// has nothing else to boot: a reset (a watchdog, a person) starts
		// the next try, with slot A's spent.
		require.NoError(t, vm.Reset(ctx))
		expect(ctx, t, vm, `terrarium: Terrarium 0\.1\.0, slot b, boot 1`)
		expect(ctx, t, vm, `terrarium: Secure Boot: on`)
		s := expectStatus(ctx, t, vm, "provisioned", "failed")
		require.Equal(t, "provisioned", s.State, "%+v", s)
		assert.Equal(t, "b", s.Slot)
		assert.Equal(t, "on", s.SecureBoot)
		assert.Equal(t, "blessed", s.Blessed)
		assert.NotContains(t, vm.Console(), "slot a, boot", "the altered slot A never ran")
	})
}

// espOffsetOf is where needle, which must occur exactly once in the ESP,
// lies on the stopped machine's disk, in bytes.
func (m *machine) espOffsetOf(needle []byte) int64 {
	m.t.Helper()
	raw, p := m.flatten("esp-find.raw", layout.LabelESP)
	f, err := os.Open(raw)
	require.NoError(m.t, err)
	defer f.Close()
	start := int64(p.Start) * layout.SectorSize
	data, err := io.ReadAll(io.NewSectionReader(f, start, int64(p.Size)))
	require.NoError(m.t, err)
	require.Equal(m.t, 1, bytes.Count(data, needle), "%q in the ESP", needle)
	return start + int64(bytes.Index(data, needle))
}

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dst, b, 0o644))
}
