package firstboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
	"github.com/terrarium-os/terrarium/pkg/node/boot/installer"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"
)

func TestLiveBoot(t *testing.T) {
	tests := []struct {
		cmdline string
		want    bool
	}{
		{"BOOT_IMAGE=/terrarium/a/vmlinuz console=ttyS0 terrarium.live terrarium.slot=a\n", true},
		{"terrarium.live=1 quiet", true},
		{"console=ttyS0 terrarium.slot=a", false},
		{"terrarium.lively", false},
		{"", false},
	}
	for _, tt := range tests {
		p := filepath.Join(t.TempDir(), "cmdline")
		require.NoError(t, os.WriteFile(p, []byte(tt.cmdline), 0o644))
		assert.Equal(t, tt.want, liveBoot(p), "%q", tt.cmdline)
	}
	assert.False(t, liveBoot(filepath.Join(t.TempDir(), "missing")))
}

func TestRefuseLiveNamesTheWayOut(t *testing.T) {
	_, err := refuseLive(t.Context(), nil, layout.SlotA, release.Release{}, upgrade.Refuse, nil)
	require.ErrorIs(t, err, errLiveUpgrade)
	assert.Contains(t, err.Error(), "ISO")
}

// TestInstallFromLive: a live boot whose config has an install section
// installs with it, seeds the new STATE with its enrollment (a node
// that reads that STATE starts enrolled), and reboots; a failed install
// is reported by name and reboots nothing; a node on its disk ignores
// the section.
func TestInstallFromLive(t *testing.T) {
	config := minimalConfig + "install:\n  disk:\n    serial: TERRA1\n  wipe: true\n"
	t.Run("installs and reboots", func(t *testing.T) {
		e := newEnv(t)
		seeded := t.TempDir()
		var got machineconfig.Install
		o := e.options(staticSource(config))
		o.InstallISO = func(ctx context.Context, in machineconfig.Install, seed func(string) error, report host.Reporter) (installer.Result, error) {
			got = in
			report.Report("install", step.Progress, "writing slot A: 100%")
			return installer.Result{Target: installer.Disk{Name: "vda", Size: 8 << 30, Serial: "TERRA1"}, SlotSHA256: "abc"}, seed(seeded)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, Run(ctx, o))
		assert.Equal(t, machineconfig.Install{Disk: machineconfig.DiskSelector{Serial: "TERRA1"}, Wipe: true}, got)
		assert.Equal(t, 1, e.reboots)
		assert.Equal(t, status.StateInstalled, e.status().State)
		assert.Contains(t, e.console.String(), "installed Terrarium 1.2.3 onto /dev/vda (8.0 GiB, serial TERRA1) (slot A sha256 abc, read back from the disk); rebooting into it")

		// The seeded STATE: the stored config and an enrollment naming it.
		stored, err := os.ReadFile(filepath.Join(seeded, layout.StateNodeConfig))
		require.NoError(t, err)
		cfg, err := machineconfig.Parse("machine.yaml", stored)
		require.NoError(t, err)
		j, err := nodestate.At(seeded).ReadJournal()
		require.NoError(t, err)
		require.NotNil(t, j.Enrollment)
		assert.Equal(t, cfg.Digest(), j.Enrollment.Digest)
		assert.Contains(t, j.Enrollment.Source, "installed from the ISO")
		assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(seeded, layout.StateNodeConfig)))
		assert.FileExists(t, filepath.Join(seeded, layout.StateMarkerFile))
		assert.Nil(t, e.journal().Provisioned, "nothing of the config applied on the live boot")
	})
	t.Run("a failed install", func(t *testing.T) {
		e := newEnv(t)
		o := e.options(staticSource(config))
		o.InstallISO = func(context.Context, machineconfig.Install, func(string) error, host.Reporter) (installer.Result, error) {
			return installer.Result{}, fmt.Errorf("%w: install.disk (serial TERRA1) selects /dev/sda, the medium this node booted from", installer.ErrBootMedium)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		require.NoError(t, Run(ctx, o), "a failed install waits for a person; firstboot does not fail (its unit would restart it into the same install)")
		assert.Equal(t, 0, e.reboots)
		s := e.status()
		assert.Equal(t, status.StateFailed, s.State)
		assert.Contains(t, s.Message, "the medium this node booted from")
		assert.Contains(t, e.console.String(), "install failed:\n")
		assert.Contains(t, e.console.String(), "this node stays live and applies nothing of its config")
		assert.Nil(t, e.journal().Provisioned)
	})
	t.Run("the installer entry without a config", func(t *testing.T) {
		e := newEnv(t)
		e.write("/proc/cmdline", "console=ttyS0 terrarium.live terrarium.install=auto terrarium.slot=a\n")
		o := e.optionsWith(noStick())
		seeded := true
		o.InstallISO = func(_ context.Context, in machineconfig.Install, seed func(string) error, _ host.Reporter) (installer.Result, error) {
			seeded = seed != nil
			assert.Equal(t, machineconfig.Install{}, in, "any empty disk")
			return installer.Result{Target: installer.Disk{Name: "vda", Size: 8 << 30}}, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, Run(ctx, o))
		assert.False(t, seeded, "nothing to enroll the installed system with")
		assert.Equal(t, 1, e.reboots)
		assert.Contains(t, e.console.String(), "the installed system will wait for one")
	})
	t.Run("a node on its disk ignores install", func(t *testing.T) {
		e := newEnv(t)
		require.NoError(t, e.run(config))
		assert.Equal(t, status.StateProvisioned, e.status().State)
		assert.Contains(t, e.console.String(), "install: ignored: this node runs from its disk")
	})
}
