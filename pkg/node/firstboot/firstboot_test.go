package firstboot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/boot/bootloader"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodephases"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/node/step"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

const wantStaticNetwork = `# Written by Terrarium firstboot from the machine config.
[Match]
Name=enp0s2

[Network]
Address=10.0.0.10/24
Address=fd00::10/64
Gateway=10.0.0.1
DNS=10.0.0.1
DNS=10.0.0.2
LinkLocalAddressing=no
IPv6AcceptRA=no
`

const wantDHCPNetwork = `# Written by Terrarium firstboot from the machine config.
[Match]
MACAddress=52:54:00:12:34:56

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no

[DHCPv4]
UseHostname=no
UseNTP=no
UseDomains=no
`

func TestFirstRunProvisions(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.run(fullConfig), "Run\nconsole:\n%s", e.console.String())

	// Hostname.
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"), "/etc/hostname")
	assert.Equal(t, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tnode-1\n", e.read("/etc/hosts"), "/etc/hosts")

	// Network: one file per interface.
	assert.Equal(t, wantStaticNetwork, e.read("/etc/systemd/network/10-terrarium-0.network"), "10-terrarium-0.network")
	assert.Equal(t, wantDHCPNetwork, e.read("/etc/systemd/network/10-terrarium-1.network"), "10-terrarium-1.network")
	networkFiles, _ := filepath.Glob(e.path("/etc/systemd/network/*"))
	assert.Len(t, networkFiles, 2, "network files")

	// Admin user.
	assert.Contains(t, e.read("/etc/passwd"), "\nops:x:", "ops not in /etc/passwd")
	keys := "/home/ops/.ssh/authorized_keys"
	assert.Equal(t, testKey1+"\n"+testKey2+"\n", e.read(keys), "authorized_keys")
	assert.Equal(t, os.FileMode(0o600), mode(t, e.path(keys)), "authorized_keys mode")
	assert.Equal(t, os.FileMode(0o700), mode(t, e.path("/home/ops/.ssh")), ".ssh mode")
	sudoers := "/etc/sudoers.d/terrarium-admin"
	assert.Equal(t, "ops ALL=(ALL) NOPASSWD:ALL\n", e.read(sudoers), "sudoers")
	assert.Equal(t, os.FileMode(0o440), mode(t, e.path(sudoers)), "sudoers mode")

	// Commands, in phase order.
	wantCmds := []string{
		"hostname node-1",
		"networkctl reload",
		"useradd --create-home --shell /bin/bash --groups sudo --comment Terrarium admin --password ! ops",
		"systemctl restart chrony.service",
		"systemctl restart terrarium-registry.service",
	}
	assert.Equal(t, wantCmds, e.commands(), "commands")

	// Journal.
	j := e.journal()
	require.Len(t, j.Boots, 1, "journal boots")
	rec := j.Boots[0]
	assert.Equal(t, 1, rec.Boot, "boot record = %+v", rec)
	assert.Equal(t, "11111111-1111-1111-1111-111111111111", rec.BootID, "boot record = %+v", rec)
	assert.Equal(t, "a", rec.Slot, "boot record = %+v", rec)
	assert.Equal(t, "provision", rec.Mode, "boot record = %+v", rec)
	assert.Equal(t, status.StateProvisioned, rec.Result, "boot record = %+v", rec)
	wantSteps := []string{"hostname=applied", "network=applied", "admin-user=applied", "time=applied", "registry-mirrors=applied", "health=passed", "bless=blessed"}
	assert.Equal(t, wantSteps, stepResults(rec), "steps")
	for i, s := range rec.Steps {
		assert.False(t, s.At.IsZero(), "step %d time %v (clock is fake, advancing)", i, s.At)
		assert.Same(t, time.UTC, s.At.Location(), "step %d time %v (clock is fake, advancing)", i, s.At)
		if i > 0 {
			assert.True(t, s.At.After(rec.Steps[i-1].At), "step %d time %v (clock is fake, advancing)", i, s.At)
		}
	}
	cfg, err := machineconfig.Parse("machine.yaml", []byte(fullConfig))
	require.NoError(t, err)
	if assert.NotNil(t, j.Provisioned, "provisioned, want digest %s at boot 1", cfg.Digest()) {
		assert.Equal(t, cfg.Digest(), j.Provisioned.ConfigDigest, "provisioned = %+v, want digest %s at boot 1", j.Provisioned, cfg.Digest())
		assert.Equal(t, 1, j.Provisioned.Boot, "provisioned = %+v, want digest %s at boot 1", j.Provisioned, cfg.Digest())
		assert.False(t, j.Provisioned.At.IsZero(), "provisioned = %+v, want digest %s at boot 1", j.Provisioned, cfg.Digest())
	}

	// Status.
	s := e.status()
	assert.Equal(t, status.StateProvisioned, s.State, "status = %+v", s)
	assert.Equal(t, "provision", s.Mode, "status = %+v", s)
	assert.Equal(t, "node-1", s.Hostname, "status = %+v", s)
	assert.Equal(t, "a", s.Slot, "status = %+v", s)
	assert.Equal(t, 1, s.Boot, "status = %+v", s)
	assert.Equal(t, "terrarium", s.Name, "status = %+v", s)
	assert.Equal(t, "1.2.3", s.Version, "status = %+v", s)
	assert.Equal(t, cfg.Digest(), s.ConfigDigest, "status = %+v", s)
	assert.Equal(t, string(bootloader.BlessedNow), s.Blessed, "status = %+v", s)
	if assert.NotNil(t, s.Healthy, "status = %+v", s) {
		assert.True(t, *s.Healthy, "status = %+v", s)
	}
	assert.Equal(t, "created=2025-06-01T11:59:00Z slot=a", s.StateCreated, "status = %+v", s)
	assert.Empty(t, s.Message, "status = %+v", s)

	// Console: the version line, the banner and the status line.
	console := e.console.String()
	for _, want := range []string{
		"terrarium: Terrarium 1.2.3, slot a, boot 1\n",
		"terrarium: config from " + configFrom + " is valid (" + cfg.Digest() + ")\n",
		"terrarium: hostname: applied\n",
		"terrarium: network: applied\n",
		"terrarium: admin-user: applied\n",
		"╭─── Terrarium ",
		"│ hostname   node-1",
		"│ state      provisioned (healthy, boot blessed)",
	} {
		assert.Contains(t, console, want, "console")
	}
	assert.Equal(t, []status.Status{s}, e.consoleStatuses(), "console statuses, want exactly status.json")
	assert.True(t, strings.HasSuffix(console, "terrarium-status: "+e.read(status.File)), "console does not end with the status line:\n%s", console)

	// Boot loader.
	assert.Equal(t, []layout.Slot{layout.SlotA}, e.loader.blessCalls(), "Bless calls")
	assert.Empty(t, e.loader.trialAsks, "healthy boot asked OnTrial")
	assert.Zero(t, e.reboots, "healthy boot rebooted")

	// The health probe is cleaned up, and no temporary files are left.
	assert.False(t, e.exists(layout.StateMount+"/"+layout.StateTerrarium+"/.health"), "health probe left on TERRA-STATE")
	err = filepath.WalkDir(e.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		assert.False(t, strings.HasSuffix(p, ".tmp"), "temporary file left: %s", p)
		return nil
	})
	require.NoError(t, err)
}

func TestSecondBootVerifies(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.run(fullConfig))
	e.resetCommands()
	e.console.Reset()
	e.loader.result = bootloader.AlreadyBlessed
	e.setBootID("22222222-2222-2222-2222-222222222222")

	require.NoError(t, e.run(fullConfig), "second Run\n%s", e.console.String())
	assert.Empty(t, e.commands(), "verify issued commands")
	j := e.journal()
	require.Len(t, j.Boots, 2, "journal boots")
	rec := j.Boots[1]
	assert.Equal(t, 2, rec.Boot, "boot record = %+v", rec)
	assert.Equal(t, "22222222-2222-2222-2222-222222222222", rec.BootID, "boot record = %+v", rec)
	assert.Equal(t, "verify", rec.Mode, "boot record = %+v", rec)
	assert.Equal(t, status.StateVerified, rec.Result, "boot record = %+v", rec)
	wantSteps := []string{"hostname=verified", "network=verified", "admin-user=verified", "time=verified", "registry-mirrors=verified", "health=passed", "bless=good"}
	assert.Equal(t, wantSteps, stepResults(rec), "steps")
	if assert.NotNil(t, j.Provisioned, "provisioned, want boot 1") {
		assert.Equal(t, 1, j.Provisioned.Boot, "provisioned = %+v, want boot 1", j.Provisioned)
	}
	s := e.status()
	assert.Equal(t, status.StateVerified, s.State, "status = %+v", s)
	assert.Equal(t, "verify", s.Mode, "status = %+v", s)
	assert.Equal(t, 2, s.Boot, "status = %+v", s)
	assert.Equal(t, string(bootloader.AlreadyBlessed), s.Blessed, "status = %+v", s)
	assert.Contains(t, e.console.String(), "Terrarium 1.2.3, slot a, boot 2", "console")
	assert.Len(t, e.loader.blessCalls(), 2, "Bless calls, want two")
}

func TestRerunInSameBootReusesRecord(t *testing.T) {
	// firstboot restarted within one boot (same boot_id) continues the
	// boot's record instead of counting a new boot.
	e := newEnv(t)
	require.NoError(t, e.run(fullConfig))
	require.NoError(t, e.run(fullConfig))
	j := e.journal()
	require.Len(t, j.Boots, 1, "journal boots")
	assert.Equal(t, "verify", j.Boots[0].Mode, "record = %+v", j.Boots[0])
	assert.Len(t, j.Boots[0].Steps, 14, "record = %+v", j.Boots[0])
	assert.Equal(t, 1, e.status().Boot, "status boot")
}

func TestVerifyHealsDrift(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.run(fullConfig))
	e.resetCommands()
	e.console.Reset()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	e.write("/etc/hostname", "intruder\n")
	e.write("/etc/systemd/network/10-terrarium-1.network", "[Match]\nName=*\n")
	e.write("/home/ops/.ssh/authorized_keys", "ssh-ed25519 AAAA mallory\n")

	require.NoError(t, e.run(fullConfig), "Run\n%s", e.console.String())
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"), "/etc/hostname")
	assert.Equal(t, wantDHCPNetwork, e.read("/etc/systemd/network/10-terrarium-1.network"), "10-terrarium-1.network not healed")
	assert.Equal(t, testKey1+"\n"+testKey2+"\n", e.read("/home/ops/.ssh/authorized_keys"), "authorized_keys not healed")
	assert.Equal(t, os.FileMode(0o600), mode(t, e.path("/home/ops/.ssh/authorized_keys")), "authorized_keys mode")
	// The user exists: healing does not add it again.
	wantCmds := []string{"hostname node-1", "networkctl reload", "usermod --lock ops"}
	assert.Equal(t, wantCmds, e.commands(), "commands")
	assert.Equal(t, 1, strings.Count(e.read("/etc/passwd"), "\nops:"), "times ops is in /etc/passwd")
	rec := e.lastBoot()
	wantSteps := []string{"hostname=healed", "network=healed", "admin-user=healed", "time=verified", "registry-mirrors=verified", "health=passed", "bless=blessed"}
	assert.Equal(t, wantSteps, stepResults(rec), "steps")
	assert.Equal(t, "verify", rec.Mode, "record = %+v", rec)
	assert.Equal(t, status.StateVerified, rec.Result, "record = %+v", rec)
	console := e.console.String()
	for _, want := range []string{
		`terrarium: hostname drifted (/etc/hostname is "intruder", config says "node-1"); healing`,
		"terrarium: hostname: healed",
		"terrarium: network drifted (",
		"terrarium: admin-user drifted (authorized_keys of ops differs from the machine config); healing",
	} {
		assert.Contains(t, console, want, "console")
	}
	assert.Equal(t, status.StateVerified, e.status().State, "state")
}

func TestVerifyHealsOnlyWhatDrifted(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.run(fullConfig))
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	require.NoError(t, os.Remove(e.path("/etc/hostname")))
	require.NoError(t, e.run(fullConfig))
	assert.Equal(t, []string{"hostname node-1"}, e.commands(), "commands")
	wantSteps := []string{"hostname=healed", "network=verified", "admin-user=verified", "time=verified", "registry-mirrors=verified", "health=passed", "bless=blessed"}
	assert.Equal(t, wantSteps, stepResults(e.lastBoot()), "steps")
}

func TestChangedConfigReconciles(t *testing.T) {
	sig := newSigner(t)
	base := sig.trusting(fullConfig)
	e := newEnv(t)
	require.NoError(t, e.run(base))
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	// A comment or reordering is not a change, signed or not.
	require.NoError(t, e.run("# a comment\n"+base))
	assert.Equal(t, "verify", e.lastBoot().Mode, "reformatted config")
	e.setBootID("33333333-3333-3333-3333-333333333333")
	require.NoError(t, e.runWithProviders(sig.stick(withGen(1, strings.Replace(base, "hostname: node-1", "hostname: node-2", 1)))))
	j := e.journal()
	rec := j.Boots[len(j.Boots)-1]
	assert.Equal(t, "change", rec.Mode)
	assert.Equal(t, 3, rec.Boot)
	assert.Equal(t, 3, j.Provisioned.Boot)
	assert.Equal(t, "node-2\n", e.read("/etc/hostname"))
	got := e.commands()
	assert.Contains(t, got, "hostname node-2")
	assert.NotContains(t, got, "networkctl reload", "the network did not change")
	assert.False(t, slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "useradd") }), "the user did not change: %q", got)
}

func TestNetworkFileRemovedWithInterface(t *testing.T) {
	sig := newSigner(t)
	e := newEnv(t)
	e.write("/etc/systemd/network/99-site.network", "[Match]\nName=lo\n")
	require.NoError(t, e.run(sig.trusting(fullConfig)))
	require.True(t, e.exists("/etc/systemd/network/10-terrarium-1.network"), "no second network file after the first run")
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	oneInterface := strings.Replace(fullConfig, "    - macAddress: \"52:54:00:12:34:56\"\n      dhcp: true\n", "", 1)
	require.NotEqual(t, fullConfig, oneInterface, "test config edit did not apply")
	require.NoError(t, e.runWithProviders(sig.stick(withGen(1, sig.trusting(oneInterface)))))
	assert.False(t, e.exists("/etc/systemd/network/10-terrarium-1.network"), "10-terrarium-1.network survived its interface's removal")
	assert.Equal(t, wantStaticNetwork, e.read("/etc/systemd/network/10-terrarium-0.network"))
	assert.True(t, e.exists("/etc/systemd/network/99-site.network"), "a network file firstboot did not write was removed")
	assert.Contains(t, e.commands(), "networkctl reload")

	// No interfaces and no admin: every Terrarium network file goes, and
	// the admin firstboot made.
	e.resetCommands()
	e.setBootID("33333333-3333-3333-3333-333333333333")
	require.NoError(t, e.runWithProviders(sig.stick(withGen(2, sig.trusting(minimalConfig)))))
	m, _ := filepath.Glob(e.path("/etc/systemd/network/10-terrarium-*"))
	assert.Empty(t, m)
	assert.Equal(t, []string{"hostname lonely", "networkctl reload", "loginctl terminate-user ops", "userdel --force --remove ops"}, e.commands())
	assert.False(t, e.exists(nodephases.AdminSudoers))
}

func TestMinimalConfig(t *testing.T) {
	// No network, no admin: nothing written for them, no commands for them.
	e := newEnv(t)
	require.NoError(t, e.run(minimalConfig))
	assert.Equal(t, []string{"hostname lonely", "systemctl restart chrony.service", "systemctl restart terrarium-registry.service"}, e.commands(), "commands")
	assert.False(t, e.exists("/etc/systemd/network"), "network or sudoers written for a config without them")
	assert.False(t, e.exists("/etc/sudoers.d"), "network or sudoers written for a config without them")
	s := e.status()
	assert.Equal(t, status.StateProvisioned, s.State, "status = %+v", s)
	assert.Equal(t, "lonely", s.Hostname, "status = %+v", s)
}

func TestWaitsForConfigDisk(t *testing.T) {
	e := newEnv(t)
	src, calls := sequenceSource(
		sourceResult{}, sourceResult{}, sourceResult{}, // no disk, three polls
		sourceResult{data: fullConfig, ok: true},
	)
	require.NoError(t, e.runWith(src), "Run\n%s", e.console.String())
	assert.Equal(t, 4, *calls, "ConfigSource calls")
	console := e.console.String()
	waiting := strings.Index(console, "terrarium: no config disk found: insert a disk or USB stick labelled TERRA-CONFIG holding machine.yaml")
	valid := strings.Index(console, "is valid")
	assert.GreaterOrEqual(t, waiting, 0, "console does not say 'no config disk found' before the config is valid:\n%s", console)
	assert.GreaterOrEqual(t, valid, 0, "console does not say 'no config disk found' before the config is valid:\n%s", console)
	assert.LessOrEqual(t, waiting, valid, "console does not say 'no config disk found' before the config is valid:\n%s", console)
	assert.Equal(t, 1, strings.Count(console, "no config disk found"), "times 'no config disk found' said, want once")
	statuses := e.consoleStatuses()
	require.Len(t, statuses, 2, "console statuses")
	assert.Equal(t, status.StateWaiting, statuses[0].State, "console statuses = %+v", statuses)
	assert.Equal(t, status.StateProvisioned, statuses[1].State, "console statuses = %+v", statuses)
	assert.Contains(t, statuses[0].Message, "TERRA-CONFIG", "waiting message")
	wantSteps := []string{"config=waiting", "hostname=applied", "network=applied", "admin-user=applied", "time=applied", "registry-mirrors=applied", "health=passed", "bless=blessed"}
	assert.Equal(t, wantSteps, stepResults(e.lastBoot()), "steps")
	s := e.status()
	assert.Equal(t, status.StateProvisioned, s.State, "final status = %+v", s)
	assert.Empty(t, s.Message, "final status = %+v", s)
}

func TestWaitingIsCancelled(t *testing.T) {
	e := newEnv(t)
	src, _ := sequenceSource(sourceResult{})
	err := e.runUntil(e.options(src), inState(status.StateWaiting))
	assert.ErrorIs(t, err, context.Canceled, "Run: want the context's error")
	assert.Equal(t, status.StateWaiting, e.status().State, "state")
	assert.False(t, e.exists("/etc/hostname"), "something was applied or blessed without a config")
	assert.Empty(t, e.commands(), "something was applied or blessed without a config")
	assert.Empty(t, e.loader.blessCalls(), "something was applied or blessed without a config")
}

func TestInvalidConfigThenFixed(t *testing.T) {
	e := newEnv(t)
	invalid := fullConfig + "bogus: 1\n"
	var checked bool
	src, calls := sequenceSource(
		sourceResult{data: invalid, ok: true},
		sourceResult{data: invalid, ok: true},
		sourceResult{data: fullConfig, ok: true},
	)
	checking := func(ctx context.Context) ([]byte, string, bool, error) {
		if *calls == 2 {
			// The invalid config was seen (twice): nothing applied yet.
			checked = true
			assert.False(t, e.exists("/etc/hostname"), "applied something from an invalid config; commands %q", e.commands())
			assert.False(t, e.exists("/etc/systemd/network"), "applied something from an invalid config; commands %q", e.commands())
			assert.Empty(t, e.commands(), "applied something from an invalid config")
			s := e.status()
			assert.Equal(t, status.StateConfigInvalid, s.State, "status while invalid = %+v", s)
			assert.Contains(t, s.Message, "$.bogus", "status while invalid = %+v", s)
		}
		return src(ctx)
	}
	require.NoError(t, e.runWith(checking), "Run\n%s", e.console.String())
	require.True(t, checked, "the config source was not polled while the config was invalid")
	console := e.console.String()
	for _, want := range []string{
		"terrarium: the config is invalid; nothing was applied. Fix these and re-insert the disk:\n",
		"terrarium:   " + configFrom + ":machine.yaml: $.bogus: unknown field",
	} {
		assert.Contains(t, console, want, "console")
	}
	assert.Equal(t, 1, strings.Count(console, "nothing was applied"), "times the same problem was reported, want once")
	assert.LessOrEqual(t, strings.Index(console, "nothing was applied"), strings.Index(console, "is valid"), "the config was accepted before it was reported invalid")
	statuses := e.consoleStatuses()
	if assert.Len(t, statuses, 2, "console statuses") {
		assert.Equal(t, status.StateConfigInvalid, statuses[0].State, "console statuses = %+v", statuses)
		assert.Equal(t, status.StateProvisioned, statuses[1].State, "console statuses = %+v", statuses)
	}
	rec := e.lastBoot()
	first := rec.Steps[0]
	assert.Equal(t, "config", first.Name, "first step = %+v", first)
	assert.Equal(t, step.Waiting, first.Result, "first step = %+v", first)
	assert.Contains(t, first.Detail, "$.bogus", "first step = %+v", first)
	s := e.status()
	assert.Equal(t, status.StateProvisioned, s.State, "final status = %+v", s)
	assert.Empty(t, s.Message, "final status = %+v", s)
}

func TestInvalidConfigThenDiskRemoved(t *testing.T) {
	// Each change of problem is reported: invalid, then no disk, then a
	// source error (a disk without machine.yaml).
	e := newEnv(t)
	src, _ := sequenceSource(
		sourceResult{data: "hostname: x\n", ok: true},
		sourceResult{},
		sourceResult{ok: true, err: errors.New("no machine.yaml on the config disk")},
	)
	// Until the third problem is on the status.
	third := func(s *status.Status) bool {
		return s.State == status.StateConfigInvalid && strings.Contains(s.Message, "no machine.yaml")
	}
	assert.ErrorIs(t, e.runUntil(e.options(src), third), context.Canceled, "Run")
	var states []string
	for _, s := range e.consoleStatuses() {
		states = append(states, s.State)
	}
	assert.Equal(t, []string{status.StateConfigInvalid, status.StateWaiting, status.StateConfigInvalid}, states, "states")
	console := e.console.String()
	// Two problems make a two-line note (pkg/node/status keeps the
	// banner a box).
	assert.Len(t, consoleBanners(console), 3, "banners, want 3:\n%s", console)
	for _, want := range []string{"$.apiVersion: required", "$.kind: required", "no config disk found", "terrarium:   no machine.yaml on the config disk"} {
		assert.Contains(t, console, want, "console")
	}
	assert.False(t, e.exists("/etc/hostname"), "applied something without a valid config")
	assert.Empty(t, e.commands(), "applied something without a valid config")
}

func TestUnhealthyTrialBootReboots(t *testing.T) {
	e := newEnv(t)
	e.setRelease([]string{"health"})
	e.loader.trial = true
	require.NoError(t, e.run(fullConfig), "Run: want the reboot's result (nil)")
	assert.Equal(t, 1, e.reboots, "reboots, want once")
	assert.Empty(t, e.loader.blessCalls(), "an unhealthy boot was blessed")
	assert.Equal(t, []layout.Slot{layout.SlotA}, e.loader.trialAsks, "OnTrial calls")
	s := e.status()
	if assert.NotNil(t, s.Healthy, "status = %+v", s) {
		assert.False(t, *s.Healthy, "status = %+v", s)
	}
	assert.Equal(t, "not blessed", s.Blessed, "status = %+v", s)
	assert.Contains(t, s.Message, `injected fault "health"`, "status = %+v", s)
	console := e.console.String()
	assert.Contains(t, console, "this boot is NOT blessed; rebooting in 1ms", "console")
	assert.Contains(t, console, "(UNHEALTHY, boot not blessed)", "banner does not show the failed health check")
	steps := e.lastBoot().Steps
	last := steps[len(steps)-1]
	assert.Equal(t, "health", last.Name, "last step = %+v", last)
	assert.Equal(t, step.Failed, last.Result, "last step = %+v", last)
	assert.Contains(t, last.Detail, "health", "last step = %+v", last)
}

func TestUnhealthyBlessedSlotStaysUp(t *testing.T) {
	for name, setup := range map[string]func(l *fakeLoader){
		"not on trial":  func(l *fakeLoader) { l.trial = false },
		"OnTrial fails": func(l *fakeLoader) { l.trial, l.trialErr = true, errFake },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.setRelease([]string{"other", "health"})
			setup(e.loader)
			err := e.run(fullConfig)
			assert.ErrorIs(t, err, errUnhealthy, "Run: want the health error")
			assert.Zero(t, e.reboots, "reboots")
			assert.Empty(t, e.loader.blessCalls(), "blessed")
			assert.Contains(t, e.console.String(), "stays up for repair", "console")
			s := e.status()
			if assert.NotNil(t, s.Healthy, "status = %+v", s) {
				assert.False(t, *s.Healthy, "status = %+v", s)
			}
			assert.Equal(t, "not blessed", s.Blessed, "status = %+v", s)
		})
	}
}

func TestUnhealthyTrialRebootCancelled(t *testing.T) {
	e := newEnv(t)
	e.setRelease([]string{"health"})
	e.loader.trial = true
	o := e.options(staticSource(fullConfig))
	o.TrialRebootDelay = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	// Cancel once the decision to reboot was published.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(e.path(status.File)); err == nil && strings.Contains(string(b), "not blessed") {
			break
		}
		if time.Now().After(deadline) {
			require.Fail(t, "no unhealthy status published")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled, "Run: want context.Canceled")
	case <-time.After(10 * time.Second):
		require.Fail(t, "Run did not return after cancel")
	}
	assert.Zero(t, e.reboots, "reboots after cancel")
}

func TestUnhealthyWhenStateNotWritable(t *testing.T) {
	e := newEnv(t)
	// A directory where the health probe goes: writing it fails even as
	// root.
	e.write(layout.StateMount+"/"+layout.StateTerrarium+"/.health/blocker", "")
	err := e.run(fullConfig)
	assert.ErrorIs(t, err, errUnhealthy, "Run: want a not-writable health error")
	assert.ErrorContains(t, err, "TERRA-STATE is not writable", "Run: want a not-writable health error")
	assert.Empty(t, e.loader.blessCalls(), "blessed")
}

func TestBlessFailure(t *testing.T) {
	e := newEnv(t)
	e.loader.blessErr = errFake
	err := e.run(fullConfig)
	assert.ErrorIs(t, err, errFake, "Run")
	assert.ErrorContains(t, err, "bless slot a", "Run")
	s := e.status()
	assert.Equal(t, "bless failed: fake error", s.Blessed, "status = %+v", s)
	if assert.NotNil(t, s.Healthy, "status = %+v", s) {
		assert.True(t, *s.Healthy, "status = %+v", s)
	}
	steps := e.lastBoot().Steps
	last := steps[len(steps)-1]
	assert.Equal(t, "bless", last.Name, "last step = %+v", last)
	assert.Equal(t, step.Failed, last.Result, "last step = %+v", last)
	assert.Equal(t, "fake error", last.Detail, "last step = %+v", last)
}

// An upgrade's trial boot whose phases fail reboots so that its try is
// counted (and, once its tries are spent, the boot loader falls back): it
// neither blesses nor exits for systemd to restart the same failure. A
// first boot that fails on trial exits (systemd retries it).
func TestApplyFailureOnUpgradeTrialReboots(t *testing.T) {
	e := enrolled(t, fullConfig)
	e.loader.trial = true
	e.failCmd["networkctl"] = errFake
	e.write("/etc/systemd/network/10-terrarium-0.network", "drifted\n") // the network phase heals, and fails
	require.Error(t, e.run(fullConfig), "no upgrade pending: the failure is returned")
	assert.Zero(t, e.reboots)

	store, err := e.state().OpenJournal()
	require.NoError(t, err)
	require.NoError(t, store.Update(func(j *nodestate.Journal) {
		j.Upgrade = &nodestate.Upgrade{From: "1.2.2", To: "1.2.3", FromSlot: "b", ToSlot: "a", State: nodestate.UpgradeInstalled}
	}))
	e.setBootID("33333333-3333-3333-3333-333333333333")
	e.write("/etc/systemd/network/10-terrarium-0.network", "drifted\n")
	blessed := len(e.loader.blessCalls())
	require.NoError(t, e.run(fullConfig), "the upgrade's trial boot ends in a reboot, not an error")
	assert.Equal(t, 1, e.reboots)
	assert.Len(t, e.loader.blessCalls(), blessed, "not blessed")
	assert.Contains(t, e.console.String(), "rebooting in")
}

func TestApplyFailure(t *testing.T) {
	e := newEnv(t)
	e.failCmd["networkctl"] = errFake
	err := e.run(fullConfig)
	if assert.ErrorIs(t, err, errFake, "Run") {
		assert.True(t, strings.HasPrefix(err.Error(), "network: networkctl reload: fake error: fake failure output"), "Run = %v", err)
	}
	assert.Equal(t, []string{"hostname node-1", "networkctl reload"}, e.commands(), "commands: the admin phase ran after network failed")
	j := e.journal()
	assert.Nil(t, j.Provisioned, "a failed provisioning is recorded as provisioned")
	rec := j.Boots[len(j.Boots)-1]
	assert.Equal(t, "failed", rec.Result, "record = %+v", rec)
	assert.Equal(t, []string{"hostname=applied", "network=failed"}, stepResults(rec), "record = %+v", rec)
	s := e.status()
	assert.Equal(t, status.StateFailed, s.State, "status = %+v", s)
	assert.Contains(t, s.Message, "networkctl reload", "status = %+v", s)
	assert.Empty(t, e.loader.blessCalls(), "a failed boot of a slot not on trial was blessed or rebooted")
	assert.Zero(t, e.reboots, "a failed boot of a slot not on trial was blessed or rebooted")

	// The next boot provisions again, and succeeds.
	delete(e.failCmd, "networkctl")
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	require.NoError(t, e.run(fullConfig))
	rec = e.lastBoot()
	assert.Equal(t, "provision", rec.Mode, "record = %+v", rec)
	assert.Equal(t, status.StateProvisioned, rec.Result, "record = %+v", rec)
	// The network files written before the failed reload are already
	// right, so this run does not reload networkd again. After a reboot
	// that is harmless (networkd reads them at start); see the report for
	// a rerun within the same boot.
}

func TestSlotFromCmdline(t *testing.T) {
	for cmdline, want := range map[string]layout.Slot{
		"quiet terrarium.slot=b":  layout.SlotB,
		"terrarium.slot=a":        layout.SlotA,
		"terrarium.slot=x":        layout.SlotA,
		"":                        layout.SlotA,
		"terrarium.slot=b ro foo": layout.SlotB,
	} {
		e := newEnv(t)
		e.write("/proc/cmdline", cmdline+"\n")
		require.NoError(t, e.run(minimalConfig), "cmdline %q", cmdline)
		assert.Equal(t, []layout.Slot{want}, e.loader.blessCalls(), "cmdline %q: Bless calls", cmdline)
		assert.Equal(t, string(want), e.status().Slot, "cmdline %q: status slot", cmdline)
		assert.Equal(t, string(want), e.lastBoot().Slot, "cmdline %q: journal slot", cmdline)
	}
}

func TestRunErrors(t *testing.T) {
	t.Run("no release.json", func(t *testing.T) {
		e := newEnv(t)
		require.NoError(t, os.Remove(e.path(layout.ReleaseFile)))
		assert.ErrorContains(t, e.run(fullConfig), "release", "Run")
	})
	t.Run("corrupt journal", func(t *testing.T) {
		e := newEnv(t)
		e.write(journalPath(), "{")
		assert.ErrorContains(t, e.run(fullConfig), "journal", "Run")
		assert.Equal(t, "{", e.read(journalPath()), "a corrupt journal was overwritten")
	})
	t.Run("journal not writable", func(t *testing.T) {
		e := newEnv(t)
		// A directory where the journal goes: it can be neither read nor
		// replaced (root ignores permissions, so no chmod would do).
		e.write(journalPath()+"/blocker", "")
		err := e.run(fullConfig)
		assert.ErrorContains(t, err, "journal", "Run")
		assert.False(t, e.exists("/etc/hostname"), "applied without a journal")
	})
}

func TestAddressWaitIsBounded(t *testing.T) {
	// With interfaces configured and addresses slow to come, the wait ends
	// at AddressWait (by the Options clock) and never fails the boot.
	e := newEnv(t)
	o := e.options(staticSource(fullConfig))
	o.AddressWait = 2 * time.Second // the fake clock advances 1s a call
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, Run(ctx, o))
	assert.LessOrEqual(t, time.Since(start), 5*time.Second, "Run took too long")
}

func TestPhaseFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(e *env)
		wantErr  string
		wantStep string
	}{
		{"hostname command", func(e *env) { e.failCmd["hostname"] = errFake }, "hostname: hostname node-1: fake error", "hostname=failed"},
		{"hosts not writable", func(e *env) { e.mkdir("/etc/hosts/blocker") }, "hostname: write /etc/hosts", "hostname=failed"},
		{"useradd", func(e *env) { e.failCmd["useradd"] = errFake }, "admin-user: useradd --create-home", "admin-user=failed"},
		{"usermod", func(e *env) {
			e.failCmd["usermod"] = errFake
			// An admin firstboot made before is locked with usermod (a
			// new one is made locked).
			e.write("/etc/passwd", e.read("/etc/passwd")+fmt.Sprintf("ops:x:%d:%d::/home/ops:/bin/bash\n", os.Getuid(), os.Getgid()))
			e.write(nodephases.AdminSudoers, "ops ALL=(ALL) NOPASSWD:ALL\n")
		}, "admin-user: usermod --lock ops: fake error", "admin-user=failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(e)
			err := e.run(fullConfig)
			// The status check below compares its message with err's.
			require.Error(t, err, "Run: want %q...", tc.wantErr)
			assert.True(t, strings.HasPrefix(err.Error(), tc.wantErr), "Run = %v, want %q...", err, tc.wantErr)
			steps := stepResults(e.lastBoot())
			if assert.NotEmpty(t, steps, "steps, want the last to be %s", tc.wantStep) {
				assert.Equal(t, tc.wantStep, steps[len(steps)-1], "steps = %v, want the last to be %s", steps, tc.wantStep)
			}
			s := e.status()
			assert.Equal(t, status.StateFailed, s.State, "status = %+v", s)
			assert.Equal(t, err.Error(), s.Message, "status = %+v", s)
			assert.Empty(t, e.loader.blessCalls(), "blessed after a failed phase")
		})
	}
}

// A node whose RTC reads 1970 steps its clock to the image's build time
// before it records anything: its enrollment has a time that can be true.
func TestClockBeforeTheImageIsSteppedFirst(t *testing.T) {
	e := newEnv(t)
	e.mu.Lock()
	e.clockNow = time.Unix(0, 0).UTC()
	e.mu.Unlock()
	require.NoError(t, e.run(minimalConfig))
	assert.Contains(t, e.console.String(), "time: stepped: the clock read 1970-01-01T00:00:01Z, before this image's build time")
	assert.Contains(t, e.console.String(), "stepped forward to 2025-01-01T00:00:00Z")
	cmds := e.commands()
	require.NotEmpty(t, cmds)
	assert.Equal(t, "date --utc --set @1735689600", cmds[0], "the first thing done")
	j := e.journal()
	require.NotNil(t, j.Enrollment)
	assert.False(t, j.Enrollment.At.Before(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)), "enrolled at %s", j.Enrollment.At)
}

// A node whose clock went back between two boots (a flat CMOS battery)
// steps it to the last time its node state recorded.
func TestClockBehindTheJournalIsStepped(t *testing.T) {
	e := enrolled(t, minimalConfig)
	var last time.Time
	for _, b := range e.journal().Boots {
		for _, s := range b.Steps {
			if s.At.After(last) {
				last = s.At
			}
		}
	}
	require.False(t, last.IsZero())
	e.mu.Lock()
	e.clockNow = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC) // after the build, before the journal
	e.mu.Unlock()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	e.console.Reset()
	require.NoError(t, e.run(minimalConfig))
	assert.Contains(t, e.console.String(), "time: stepped: the clock read 2025-03-01T00:00:01Z, before the last step this node recorded; stepped forward to "+last.UTC().Format(time.RFC3339))
}

// A step whose journal write fails is logged at Warn, saying what it
// recorded, and the node goes on.
func TestUnrecordedStepIsLogged(t *testing.T) {
	e := newEnv(t)
	var logged strings.Builder
	o := e.optionsWith(noStick())
	o.Log = slog.New(slog.NewTextHandler(&logged, nil))
	r, err := newRunner(o)
	require.NoError(t, err)
	// A directory where the journal goes: it cannot be written.
	require.NoError(t, os.RemoveAll(r.state.Path()))
	require.NoError(t, os.MkdirAll(filepath.Join(r.state.Path(), "x"), 0o755))
	r.note("backup", step.Written, "backup.tar")
	assert.Contains(t, logged.String(), "level=WARN")
	assert.Contains(t, logged.String(), `msg="journal: step not recorded" step=backup result=written detail=backup.tar`)
}
