package qemutests

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// signedDisk writes a config disk holding yaml and its signature by key.
func (m *machine) signedDisk(name, yaml string, key ed25519.PrivateKey) string {
	m.t.Helper()
	p := filepath.Join(m.dir, name)
	require.NoError(m.t, configdisk.WriteSigned(p, []byte(yaml), signature.Sign(key, []byte(yaml))))
	return p
}

func stick(path string) qemu.Disk {
	return qemu.Disk{ID: "stick", Path: path, Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}
}

// unitStarts reads when containerd and the registry last started
// (monotonic microseconds): a restart changes them.
func unitStarts(t *testing.T, s *sshClient) string {
	t.Helper()
	out, err := s.read("systemctl show -p ActiveEnterTimestampMonotonic containerd.service terrarium-registry.service")
	require.NoError(t, err, out)
	require.Regexp(t, `(?s)ActiveEnterTimestampMonotonic=[1-9][0-9]*.*ActiveEnterTimestampMonotonic=[1-9][0-9]*`, out)
	return out
}

// TestSignedConfigChange: an enrolled node boots without its stick; a
// signed stick hot-plugged into the running node changes its hostname and
// replaces its admin (the old one is removed) without restarting
// containerd or the registry.
func TestSignedConfigChange(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	port := m.forwardSSH()
	signKey, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	trust := "trustedKeys:\n  - " + pub.String() + "\n"
	first := adminConfig("node-1", key.authorized, trust)

	vm := m.boot(ctx, configAttached(m.configDisk("config.img", first)))
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	require.NoError(t, vm.Quit(ctx))

	// No stick from here on.
	vm = m.boot(ctx)
	s = expectStatus(ctx, t, vm, "verified", "failed")
	require.Equal(t, "verified", s.State, "%+v", s)
	admin := dialSSH(ctx, t, port, key)
	before := unitStarts(t, admin)

	changed := strings.Replace(adminConfig("node-2", key.authorized, trust), "name: admin", "name: ops", 1)
	changed = strings.Replace(changed, "kind: MachineConfig\n", "kind: MachineConfig\ngeneration: 1\n", 1)
	require.Contains(t, changed, "generation: 1\n", "a signed change carries a generation")
	require.NoError(t, vm.HotplugDisk(ctx, stick(m.signedDisk("signed.img", changed, signKey))))
	expect(ctx, t, vm, `config change from \S+, generation 1, signed by `+pub.ID()+` .*: accepted`)
	s = expectStatus(ctx, t, vm, "changed", "failed")
	require.Equal(t, "changed", s.State, "%+v", s)
	assert.Equal(t, "node-2", s.Hostname)
	assert.Contains(t, s.Enrolled, "changed from")
	require.NotNil(t, s.Healthy)
	assert.True(t, *s.Healthy)

	ops, err := trySSHAs(ctx, t, port, key, "ops")
	require.NoError(t, err, "the new admin logs in")
	assert.Equal(t, before, unitStarts(t, ops), "containerd and the registry were not restarted")
	host, err := ops.read("hostname")
	require.NoError(t, err)
	assert.Equal(t, "node-2", strings.TrimSpace(host))
	out, err := ops.read("id admin")
	assert.Error(t, err, "the removed admin is gone: %s", out)
	_, err = ops.read("test ! -e /home/admin")
	assert.NoError(t, err, "its home is gone")
	require.NoError(t, vm.Quit(ctx))

	st := m.inspectState()
	// What STATE holds, when a check below fails (inspectState replays
	// STATE's journal first; without that both files can read empty).
	held := func() string {
		return "/etc/upper:\n" + st.debugfs("ls -l /etc/upper") + "\n/terrarium:\n" + st.debugfs("ls -l /terrarium")
	}
	assert.Equal(t, "node-2\n", st.readFile("/etc/upper/hostname"), held())
	assert.Contains(t, st.readFile("/terrarium/journal.json"), `"signedBy": "`+pub.ID()+`"`, held())
}

// enrolledBanner is the banner's enrollment line.
var enrolledBanner = regexp.MustCompile(`│ enrolled\s+from /dev/disk/by-label/TERRA-CONFI\S* at 20\d\d-`)

// TestFwCfgEnrollment: with no config disk, a machine config passed with
// QEMU's -fw_cfg (the CI engineer's channel) enrolls the node. Powered on
// again with its RTC far off (a flat CMOS battery: 1990, which the guest
// reads as 2090 and systemd resets to its own build time), its clock is
// stepped to the last time its node state recorded before anything else,
// the step says what the hardware clock read, and the banner names the
// time source.
func TestFwCfgEnrollment(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	cfg := filepath.Join(m.dir, "machine.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(adminConfig("ci-node", newSSHKey(t).authorized, "")), 0o644))
	m.fwCfg = []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: cfg}}

	vm := m.boot(ctx)
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	assert.Equal(t, "ci-node", s.Hostname)
	assert.Contains(t, s.Enrolled, "from QEMU fw_cfg (opt/dev.terrarium/config)")
	assert.Equal(t, "local clock (a standalone node has no time source)", s.Time)
	cutPower(ctx, t, vm)

	m.rtcBase = "1990-01-01T00:00:00"
	vm = m.boot(ctx)
	stepped := expect(ctx, t, vm, `time: stepped: the clock read (\S+) \(the hardware clock read (\S+)\), before the last step this node recorded; stepped forward to (\S+),`)
	t.Logf("clock read %s (hardware clock %s), stepped to %s", stepped[1], stepped[2], stepped[3])
	rtc, err := time.Parse(time.RFC3339, stepped[2])
	require.NoError(t, err)
	assert.True(t, rtc.Year() == 1990 || rtc.Year() == 2090, "the hardware clock read %s: 1990, or 2090 through the firmware", rtc)
	s = expectStatus(ctx, t, vm, "verified", "failed")
	require.Equal(t, "verified", s.State, "%+v", s)
	to, err := time.Parse(time.RFC3339, stepped[3])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), to, time.Hour, "stepped to the first boot's last step, minutes ago")
}
