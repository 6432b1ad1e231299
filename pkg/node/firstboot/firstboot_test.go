package firstboot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
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
	if err := e.run(fullConfig); err != nil {
		t.Fatalf("Run: %v\nconsole:\n%s", err, e.console.String())
	}

	// Hostname.
	if got := e.read("/etc/hostname"); got != "node-1\n" {
		t.Errorf("/etc/hostname = %q", got)
	}
	if got, want := e.read("/etc/hosts"), "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tnode-1\n"; got != want {
		t.Errorf("/etc/hosts = %q, want %q", got, want)
	}

	// Network: one file per interface.
	if got := e.read("/etc/systemd/network/10-terrarium-0.network"); got != wantStaticNetwork {
		t.Errorf("10-terrarium-0.network:\n%s\nwant:\n%s", got, wantStaticNetwork)
	}
	if got := e.read("/etc/systemd/network/10-terrarium-1.network"); got != wantDHCPNetwork {
		t.Errorf("10-terrarium-1.network:\n%s\nwant:\n%s", got, wantDHCPNetwork)
	}
	if m, _ := filepath.Glob(e.path("/etc/systemd/network/*")); len(m) != 2 {
		t.Errorf("network files: %v", m)
	}

	// Admin user.
	if !strings.Contains(e.read("/etc/passwd"), "\nops:x:") {
		t.Errorf("ops not in /etc/passwd:\n%s", e.read("/etc/passwd"))
	}
	keys := "/home/ops/.ssh/authorized_keys"
	if got, want := e.read(keys), testKey1+"\n"+testKey2+"\n"; got != want {
		t.Errorf("authorized_keys = %q, want %q", got, want)
	}
	if m := mode(t, e.path(keys)); m != 0o600 {
		t.Errorf("authorized_keys mode = %o, want 600", m)
	}
	if m := mode(t, e.path("/home/ops/.ssh")); m != 0o700 {
		t.Errorf(".ssh mode = %o, want 700", m)
	}
	sudoers := "/etc/sudoers.d/terrarium-admin"
	if got := e.read(sudoers); got != "ops ALL=(ALL) NOPASSWD:ALL\n" {
		t.Errorf("sudoers = %q", got)
	}
	if m := mode(t, e.path(sudoers)); m != 0o440 {
		t.Errorf("sudoers mode = %o, want 440", m)
	}

	// Commands, in phase order.
	wantCmds := []string{
		"hostname node-1",
		"networkctl reload",
		"useradd --create-home --shell /bin/bash --groups sudo --comment Terrarium admin --password ! ops",
		"systemctl restart chrony.service",
		"systemctl restart terrarium-registry.service",
	}
	if got := e.commands(); !reflect.DeepEqual(got, wantCmds) {
		t.Errorf("commands:\n%q\nwant:\n%q", got, wantCmds)
	}

	// Journal.
	j := e.journal()
	if len(j.Boots) != 1 {
		t.Fatalf("journal has %d boots, want 1", len(j.Boots))
	}
	rec := j.Boots[0]
	if rec.Boot != 1 || rec.BootID != "11111111-1111-1111-1111-111111111111" || rec.Slot != "a" || rec.Mode != "provision" || rec.Result != status.StateProvisioned {
		t.Errorf("boot record = %+v", rec)
	}
	wantSteps := []string{"hostname=applied", "network=applied", "admin-user=applied", "time=applied", "registry-mirrors=applied", "health=passed", "bless=blessed"}
	if got := stepResults(rec); !reflect.DeepEqual(got, wantSteps) {
		t.Errorf("steps = %v, want %v", got, wantSteps)
	}
	for i, s := range rec.Steps {
		if s.At.IsZero() || s.At.Location() != time.UTC || (i > 0 && !s.At.After(rec.Steps[i-1].At)) {
			t.Errorf("step %d time %v (clock is fake, advancing)", i, s.At)
		}
	}
	cfg, err := machineconfig.Parse("machine.yaml", []byte(fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	if j.Provisioned == nil || j.Provisioned.ConfigDigest != cfg.Digest() || j.Provisioned.Boot != 1 || j.Provisioned.At.IsZero() {
		t.Errorf("provisioned = %+v, want digest %s at boot 1", j.Provisioned, cfg.Digest())
	}

	// Status.
	s := e.status()
	if s.State != status.StateProvisioned || s.Mode != "provision" || s.Hostname != "node-1" || s.Slot != "a" || s.Boot != 1 ||
		s.Name != "terrarium" || s.Version != "1.2.3" || s.ConfigDigest != cfg.Digest() || s.Blessed != string(bootloader.BlessedNow) ||
		s.Healthy == nil || !*s.Healthy || s.StateCreated != "created=2025-06-01T11:59:00Z slot=a" || s.Message != "" {
		t.Errorf("status = %+v", s)
	}

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
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	statuses := e.consoleStatuses()
	if len(statuses) != 1 || !reflect.DeepEqual(statuses[0], s) {
		t.Errorf("console statuses = %+v, want exactly status.json %+v", statuses, s)
	}
	if !strings.HasSuffix(console, "terrarium-status: "+e.read(status.File)) {
		t.Errorf("console does not end with the status line:\n%s", console)
	}

	// Boot loader.
	if got := e.loader.blessCalls(); !reflect.DeepEqual(got, []layout.Slot{layout.SlotA}) {
		t.Errorf("Bless calls = %v, want [a]", got)
	}
	if len(e.loader.trialAsks) != 0 || e.reboots != 0 {
		t.Errorf("healthy boot asked OnTrial %v / rebooted %d", e.loader.trialAsks, e.reboots)
	}

	// The health probe is cleaned up, and no temporary files are left.
	if e.exists(layout.StateMount + "/" + layout.StateTerrarium + "/.health") {
		t.Error("health probe left on TERRA-STATE")
	}
	err = filepath.WalkDir(e.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".tmp") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSecondBootVerifies(t *testing.T) {
	e := newEnv(t)
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	e.resetCommands()
	e.console.Reset()
	e.loader.result = bootloader.AlreadyBlessed
	e.setBootID("22222222-2222-2222-2222-222222222222")

	if err := e.run(fullConfig); err != nil {
		t.Fatalf("second Run: %v\n%s", err, e.console.String())
	}
	if got := e.commands(); len(got) != 0 {
		t.Errorf("verify issued commands: %q", got)
	}
	j := e.journal()
	if len(j.Boots) != 2 {
		t.Fatalf("journal has %d boots, want 2", len(j.Boots))
	}
	rec := j.Boots[1]
	if rec.Boot != 2 || rec.BootID != "22222222-2222-2222-2222-222222222222" || rec.Mode != "verify" || rec.Result != status.StateVerified {
		t.Errorf("boot record = %+v", rec)
	}
	wantSteps := []string{"hostname=verified", "network=verified", "admin-user=verified", "time=verified", "registry-mirrors=verified", "health=passed", "bless=good"}
	if got := stepResults(rec); !reflect.DeepEqual(got, wantSteps) {
		t.Errorf("steps = %v, want %v", got, wantSteps)
	}
	if j.Provisioned == nil || j.Provisioned.Boot != 1 {
		t.Errorf("provisioned = %+v, want boot 1", j.Provisioned)
	}
	s := e.status()
	if s.State != status.StateVerified || s.Mode != "verify" || s.Boot != 2 || s.Blessed != string(bootloader.AlreadyBlessed) {
		t.Errorf("status = %+v", s)
	}
	if !strings.Contains(e.console.String(), "Terrarium 1.2.3, slot a, boot 2") {
		t.Errorf("console:\n%s", e.console.String())
	}
	if got := e.loader.blessCalls(); len(got) != 2 {
		t.Errorf("Bless calls = %v, want two", got)
	}
}

func TestRerunInSameBootReusesRecord(t *testing.T) {
	// firstboot restarted within one boot (same boot_id) continues the
	// boot's record instead of counting a new boot.
	e := newEnv(t)
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	j := e.journal()
	if len(j.Boots) != 1 {
		t.Fatalf("journal has %d boots, want 1", len(j.Boots))
	}
	if j.Boots[0].Mode != "verify" || len(j.Boots[0].Steps) != 14 {
		t.Errorf("record = %+v", j.Boots[0])
	}
	if s := e.status(); s.Boot != 1 {
		t.Errorf("status boot = %d", s.Boot)
	}
}

func TestVerifyHealsDrift(t *testing.T) {
	e := newEnv(t)
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	e.resetCommands()
	e.console.Reset()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	e.write("/etc/hostname", "intruder\n")
	e.write("/etc/systemd/network/10-terrarium-1.network", "[Match]\nName=*\n")
	e.write("/home/ops/.ssh/authorized_keys", "ssh-ed25519 AAAA mallory\n")

	if err := e.run(fullConfig); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if got := e.read("/etc/hostname"); got != "node-1\n" {
		t.Errorf("/etc/hostname = %q", got)
	}
	if got := e.read("/etc/systemd/network/10-terrarium-1.network"); got != wantDHCPNetwork {
		t.Errorf("10-terrarium-1.network not healed:\n%s", got)
	}
	if got := e.read("/home/ops/.ssh/authorized_keys"); got != testKey1+"\n"+testKey2+"\n" {
		t.Errorf("authorized_keys not healed: %q", got)
	}
	if m := mode(t, e.path("/home/ops/.ssh/authorized_keys")); m != 0o600 {
		t.Errorf("authorized_keys mode = %o", m)
	}
	// The user exists: healing does not add it again.
	wantCmds := []string{"hostname node-1", "networkctl reload", "usermod --lock ops"}
	if got := e.commands(); !reflect.DeepEqual(got, wantCmds) {
		t.Errorf("commands = %q, want %q", got, wantCmds)
	}
	if n := strings.Count(e.read("/etc/passwd"), "\nops:"); n != 1 {
		t.Errorf("ops is %d times in /etc/passwd", n)
	}
	rec := e.lastBoot()
	wantSteps := []string{"hostname=healed", "network=healed", "admin-user=healed", "time=verified", "registry-mirrors=verified", "health=passed", "bless=blessed"}
	if got := stepResults(rec); !reflect.DeepEqual(got, wantSteps) {
		t.Errorf("steps = %v, want %v", got, wantSteps)
	}
	if rec.Mode != "verify" || rec.Result != status.StateVerified {
		t.Errorf("record = %+v", rec)
	}
	console := e.console.String()
	for _, want := range []string{
		`terrarium: hostname drifted (/etc/hostname is "intruder", config says "node-1"); healing`,
		"terrarium: hostname: healed",
		"terrarium: network drifted (",
		"terrarium: admin-user drifted (authorized_keys of ops differs from the machine config); healing",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	if s := e.status(); s.State != status.StateVerified {
		t.Errorf("state = %q", s.State)
	}
}

func TestVerifyHealsOnlyWhatDrifted(t *testing.T) {
	e := newEnv(t)
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	if err := os.Remove(e.path("/etc/hostname")); err != nil {
		t.Fatal(err)
	}
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	if got := e.commands(); !reflect.DeepEqual(got, []string{"hostname node-1"}) {
		t.Errorf("commands = %q", got)
	}
	wantSteps := []string{"hostname=healed", "network=verified", "admin-user=verified", "time=verified", "registry-mirrors=verified", "health=passed", "bless=blessed"}
	if got := stepResults(e.lastBoot()); !reflect.DeepEqual(got, wantSteps) {
		t.Errorf("steps = %v, want %v", got, wantSteps)
	}
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
	if err := e.run(minimalConfig); err != nil {
		t.Fatal(err)
	}
	if got := e.commands(); !reflect.DeepEqual(got, []string{"hostname lonely", "systemctl restart chrony.service", "systemctl restart terrarium-registry.service"}) {
		t.Errorf("commands = %q", got)
	}
	if e.exists("/etc/systemd/network") || e.exists("/etc/sudoers.d") {
		t.Error("network or sudoers written for a config without them")
	}
	if s := e.status(); s.State != status.StateProvisioned || s.Hostname != "lonely" {
		t.Errorf("status = %+v", s)
	}
}

func TestWaitsForConfigDisk(t *testing.T) {
	e := newEnv(t)
	src, calls := sequenceSource(
		sourceResult{}, sourceResult{}, sourceResult{}, // no disk, three polls
		sourceResult{data: fullConfig, ok: true},
	)
	if err := e.runWith(src); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if *calls != 4 {
		t.Errorf("ConfigSource called %d times, want 4", *calls)
	}
	console := e.console.String()
	waiting := strings.Index(console, "terrarium: no config disk found: insert a disk or USB stick labelled TERRA-CONFIG holding machine.yaml")
	valid := strings.Index(console, "is valid")
	if waiting < 0 || valid < 0 || waiting > valid {
		t.Errorf("console does not say 'no config disk found' before the config is valid:\n%s", console)
	}
	if n := strings.Count(console, "no config disk found"); n != 1 {
		t.Errorf("'no config disk found' said %d times, want once", n)
	}
	statuses := e.consoleStatuses()
	if len(statuses) != 2 || statuses[0].State != status.StateWaiting || statuses[1].State != status.StateProvisioned {
		t.Errorf("console statuses = %+v", statuses)
	}
	if !strings.Contains(statuses[0].Message, "TERRA-CONFIG") {
		t.Errorf("waiting message = %q", statuses[0].Message)
	}
	wantSteps := []string{"config=waiting", "hostname=applied", "network=applied", "admin-user=applied", "time=applied", "registry-mirrors=applied", "health=passed", "bless=blessed"}
	if got := stepResults(e.lastBoot()); !reflect.DeepEqual(got, wantSteps) {
		t.Errorf("steps = %v, want %v", got, wantSteps)
	}
	if s := e.status(); s.State != status.StateProvisioned || s.Message != "" {
		t.Errorf("final status = %+v", s)
	}
}

func TestWaitingIsCancelled(t *testing.T) {
	e := newEnv(t)
	src, _ := sequenceSource(sourceResult{})
	err := e.runUntil(e.options(src), inState(status.StateWaiting))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want the context's error", err)
	}
	if s := e.status(); s.State != status.StateWaiting {
		t.Errorf("state = %q, want %q", s.State, status.StateWaiting)
	}
	if e.exists("/etc/hostname") || len(e.commands()) != 0 || len(e.loader.blessCalls()) != 0 {
		t.Error("something was applied or blessed without a config")
	}
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
			if e.exists("/etc/hostname") || e.exists("/etc/systemd/network") || len(e.commands()) != 0 {
				t.Errorf("applied something from an invalid config; commands %q", e.commands())
			}
			if s := e.status(); s.State != status.StateConfigInvalid || !strings.Contains(s.Message, "$.bogus") {
				t.Errorf("status while invalid = %+v", s)
			}
		}
		return src(ctx)
	}
	if err := e.runWith(checking); err != nil {
		t.Fatalf("Run: %v\n%s", err, e.console.String())
	}
	if !checked {
		t.Fatal("the config source was not polled while the config was invalid")
	}
	console := e.console.String()
	for _, want := range []string{
		"terrarium: the config is invalid; nothing was applied. Fix these and re-insert the disk:\n",
		"terrarium:   " + configFrom + ":machine.yaml: $.bogus: unknown field",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	if n := strings.Count(console, "nothing was applied"); n != 1 {
		t.Errorf("the same problem was reported %d times, want once", n)
	}
	if strings.Index(console, "nothing was applied") > strings.Index(console, "is valid") {
		t.Error("the config was accepted before it was reported invalid")
	}
	statuses := e.consoleStatuses()
	if len(statuses) != 2 || statuses[0].State != status.StateConfigInvalid || statuses[1].State != status.StateProvisioned {
		t.Errorf("console statuses = %+v", statuses)
	}
	rec := e.lastBoot()
	if rec.Steps[0].Name != "config" || rec.Steps[0].Result != step.Waiting || !strings.Contains(rec.Steps[0].Detail, "$.bogus") {
		t.Errorf("first step = %+v", rec.Steps[0])
	}
	if s := e.status(); s.State != status.StateProvisioned || s.Message != "" {
		t.Errorf("final status = %+v", s)
	}
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
	if err := e.runUntil(e.options(src), third); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	var states []string
	for _, s := range e.consoleStatuses() {
		states = append(states, s.State)
	}
	if want := []string{status.StateConfigInvalid, status.StateWaiting, status.StateConfigInvalid}; !reflect.DeepEqual(states, want) {
		t.Errorf("states = %v, want %v", states, want)
	}
	console := e.console.String()
	// Two problems make a two-line note (pkg/node/status keeps the
	// banner a box).
	if banners := consoleBanners(console); len(banners) != 3 {
		t.Errorf("%d banners, want 3:\n%s", len(banners), console)
	}
	for _, want := range []string{"$.apiVersion: required", "$.kind: required", "no config disk found", "terrarium:   no machine.yaml on the config disk"} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, console)
		}
	}
	if e.exists("/etc/hostname") || len(e.commands()) != 0 {
		t.Error("applied something without a valid config")
	}
}

func TestUnhealthyTrialBootReboots(t *testing.T) {
	e := newEnv(t)
	e.setRelease([]string{"health"})
	e.loader.trial = true
	if err := e.run(fullConfig); err != nil {
		t.Fatalf("Run = %v, want the reboot's result (nil)", err)
	}
	if e.reboots != 1 {
		t.Errorf("rebooted %d times, want once", e.reboots)
	}
	if got := e.loader.blessCalls(); len(got) != 0 {
		t.Errorf("an unhealthy boot was blessed: %v", got)
	}
	if !reflect.DeepEqual(e.loader.trialAsks, []layout.Slot{layout.SlotA}) {
		t.Errorf("OnTrial calls = %v", e.loader.trialAsks)
	}
	s := e.status()
	if s.Healthy == nil || *s.Healthy || s.Blessed != "not blessed" || !strings.Contains(s.Message, `injected fault "health"`) {
		t.Errorf("status = %+v", s)
	}
	console := e.console.String()
	if !strings.Contains(console, "this boot is NOT blessed; rebooting in 1ms") {
		t.Errorf("console:\n%s", console)
	}
	if !strings.Contains(console, "(UNHEALTHY, boot not blessed)") {
		t.Errorf("banner does not show the failed health check:\n%s", console)
	}
	steps := e.lastBoot().Steps
	if last := steps[len(steps)-1]; last.Name != "health" || last.Result != step.Failed || !strings.Contains(last.Detail, "health") {
		t.Errorf("last step = %+v", last)
	}
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
			if !errors.Is(err, errUnhealthy) {
				t.Errorf("Run = %v, want the health error", err)
			}
			if e.reboots != 0 {
				t.Errorf("rebooted %d times", e.reboots)
			}
			if got := e.loader.blessCalls(); len(got) != 0 {
				t.Errorf("blessed: %v", got)
			}
			if !strings.Contains(e.console.String(), "stays up for repair") {
				t.Errorf("console:\n%s", e.console.String())
			}
			if s := e.status(); s.Healthy == nil || *s.Healthy || s.Blessed != "not blessed" {
				t.Errorf("status = %+v", s)
			}
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
			t.Fatal("no unhealthy status published")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if e.reboots != 0 {
		t.Errorf("rebooted %d times after cancel", e.reboots)
	}
}

func TestUnhealthyWhenStateNotWritable(t *testing.T) {
	e := newEnv(t)
	// A directory where the health probe goes: writing it fails even as
	// root.
	e.write(layout.StateMount+"/"+layout.StateTerrarium+"/.health/blocker", "")
	err := e.run(fullConfig)
	if !errors.Is(err, errUnhealthy) || !strings.Contains(err.Error(), "TERRA-STATE is not writable") {
		t.Errorf("Run = %v, want a not-writable health error", err)
	}
	if len(e.loader.blessCalls()) != 0 {
		t.Error("blessed")
	}
}

func TestBlessFailure(t *testing.T) {
	e := newEnv(t)
	e.loader.blessErr = errFake
	err := e.run(fullConfig)
	if !errors.Is(err, errFake) || !strings.Contains(err.Error(), "bless slot a") {
		t.Errorf("Run = %v", err)
	}
	s := e.status()
	if s.Blessed != "bless failed: fake error" || s.Healthy == nil || !*s.Healthy {
		t.Errorf("status = %+v", s)
	}
	steps := e.lastBoot().Steps
	if last := steps[len(steps)-1]; last.Name != "bless" || last.Result != step.Failed || last.Detail != "fake error" {
		t.Errorf("last step = %+v", last)
	}
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
	if !errors.Is(err, errFake) || !strings.HasPrefix(err.Error(), "network: networkctl reload: fake error: fake failure output") {
		t.Errorf("Run = %v", err)
	}
	if got := e.commands(); !reflect.DeepEqual(got, []string{"hostname node-1", "networkctl reload"}) {
		t.Errorf("commands = %q: the admin phase ran after network failed", got)
	}
	j := e.journal()
	if j.Provisioned != nil {
		t.Errorf("a failed provisioning is recorded as provisioned: %+v", j.Provisioned)
	}
	rec := j.Boots[len(j.Boots)-1]
	if rec.Result != "failed" || !reflect.DeepEqual(stepResults(rec), []string{"hostname=applied", "network=failed"}) {
		t.Errorf("record = %+v", rec)
	}
	s := e.status()
	if s.State != status.StateFailed || !strings.Contains(s.Message, "networkctl reload") {
		t.Errorf("status = %+v", s)
	}
	if len(e.loader.blessCalls()) != 0 || e.reboots != 0 {
		t.Error("a failed boot of a slot not on trial was blessed or rebooted")
	}

	// The next boot provisions again, and succeeds.
	delete(e.failCmd, "networkctl")
	e.resetCommands()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	if err := e.run(fullConfig); err != nil {
		t.Fatal(err)
	}
	if rec := e.lastBoot(); rec.Mode != "provision" || rec.Result != status.StateProvisioned {
		t.Errorf("record = %+v", rec)
	}
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
		if err := e.run(minimalConfig); err != nil {
			t.Fatal(err)
		}
		if got := e.loader.blessCalls(); !reflect.DeepEqual(got, []layout.Slot{want}) {
			t.Errorf("cmdline %q: Bless calls %v, want [%s]", cmdline, got, want)
		}
		if s := e.status(); s.Slot != string(want) {
			t.Errorf("cmdline %q: status slot %q", cmdline, s.Slot)
		}
		if rec := e.lastBoot(); rec.Slot != string(want) {
			t.Errorf("cmdline %q: journal slot %q", cmdline, rec.Slot)
		}
	}
}

func TestRunErrors(t *testing.T) {
	t.Run("no release.json", func(t *testing.T) {
		e := newEnv(t)
		if err := os.Remove(e.path(layout.ReleaseFile)); err != nil {
			t.Fatal(err)
		}
		if err := e.run(fullConfig); err == nil || !strings.Contains(err.Error(), "release") {
			t.Errorf("Run = %v", err)
		}
	})
	t.Run("corrupt journal", func(t *testing.T) {
		e := newEnv(t)
		e.write(journalPath(), "{")
		if err := e.run(fullConfig); err == nil || !strings.Contains(err.Error(), "journal") {
			t.Errorf("Run = %v", err)
		}
		if e.read(journalPath()) != "{" {
			t.Error("a corrupt journal was overwritten")
		}
	})
	t.Run("journal not writable", func(t *testing.T) {
		e := newEnv(t)
		// A directory where the journal goes: it can be neither read nor
		// replaced (root ignores permissions, so no chmod would do).
		e.write(journalPath()+"/blocker", "")
		err := e.run(fullConfig)
		if err == nil || !strings.Contains(err.Error(), "journal") {
			t.Errorf("Run = %v", err)
		}
		if e.exists("/etc/hostname") {
			t.Error("applied without a journal")
		}
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
	if err := Run(ctx, o); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %s", d)
	}
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
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("Run = %v, want %q...", err, tc.wantErr)
			}
			steps := stepResults(e.lastBoot())
			if len(steps) == 0 || steps[len(steps)-1] != tc.wantStep {
				t.Errorf("steps = %v, want the last to be %s", steps, tc.wantStep)
			}
			if s := e.status(); s.State != status.StateFailed || s.Message != err.Error() {
				t.Errorf("status = %+v", s)
			}
			if len(e.loader.blessCalls()) != 0 {
				t.Error("blessed after a failed phase")
			}
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
