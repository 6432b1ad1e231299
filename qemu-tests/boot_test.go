package qemutests

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

var testSubnet = &net.IPNet{IP: net.IPv4(10, 0, 2, 0), Mask: net.CIDRMask(24, 32)}

// TestEnrollRebootChange is one machine's life, one boot after another
// (cases of their own would boot it seven times):
//
//   - powered on with no config, the console asks for one; bad cluster
//     config sticks plugged in one after another are each refused by
//     field and fix (refuseBadClusterConfigs); a good stick is found, and
//     the node provisions, enrolls and blesses its boot; nothing of the
//     bad sticks was applied;
//   - the power is cut, the disk grown by 1 GiB and the RTC battery flat;
//     without its stick the node steps its clock to the last time it
//     recorded, finds STATE intact (same filesystem, marker from the
//     first boot), grows it, runs from the stored config and only
//     verifies;
//   - an unsigned stick with another config is refused, nothing changes;
//   - a signed stick changes its hostname and replaces its admin (the old
//     one removed) without restarting containerd or the registry;
//   - an ext4 support stick is refused by name, a FAT one receives the
//     support bundle, both through the stick service's sandbox;
//   - on the stopped disk: STATE grew, kept its filesystem and marker, and
//     holds the change; the journal holds every step; no packet left the
//     test network.
func TestEnrollRebootChange(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	port := m.forwardSSH()
	signKey, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	trust := "trustedKeys:\n  - " + pub.String() + "\n"
	cfg := m.configDisk("config.img", adminConfig("node-1", key.authorized, trust))

	// No config: the console asks; the stick plugged in is found.
	vm := m.boot(ctx)
	expect(ctx, t, vm, `terrarium-init: created TERRA-STATE`)
	expect(ctx, t, vm, `formatting TERRA-STATE .* \(reason: new partition\)`)
	expect(ctx, t, vm, `no config disk found: insert a disk or USB stick labelled TERRA-CONFIG`)
	s0 := expectStatus(ctx, t, vm, "waiting-for-config")
	require.Empty(t, s0.Hostname, "a waiting node has no hostname yet: %+v", s0)
	refuseBadClusterConfigs(ctx, t, m, vm)
	require.NoError(t, vm.HotplugDisk(ctx, stick(cfg)), "hot-plug the config stick")
	expect(ctx, t, vm, `hostname\s+node-1`)
	s1 := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s1.State, "%+v", s1)
	assert.Equal(t, "provision", s1.Mode)
	assert.Equal(t, "node-1", s1.Hostname)
	assert.Equal(t, 1, s1.Boot)
	require.True(t, s1.Healthy != nil && *s1.Healthy && s1.Blessed == "blessed", "first boot not blessed: %+v", s1)
	if assert.NotEmpty(t, s1.Addresses) {
		assert.True(t, strings.HasPrefix(s1.Addresses[0], "10.0.2."), "first boot addresses %v, want a DHCP address in 10.0.2.0/24", s1.Addresses)
	}
	assert.True(t, strings.HasPrefix(s1.Enrolled, "from /dev/disk/by-label/TERRA-CONFI"), "first boot enrolled %q", s1.Enrolled)
	assert.Equal(t, "local clock (a standalone node has no time source)", s1.Time)

	// QMP quit: the power is cut, nothing is shut down.
	require.NoError(t, vm.Quit(ctx))
	// A machine without a TPM says its STATE is plain, and it is: what
	// TestStateEncryption finds nowhere on an encrypted one is here.
	seen(ctx, t, vm, regexp.MustCompile(`terrarium: TERRA-STATE: NOT encrypted: this machine has no TPM 2\.0`))
	assert.Equal(t, "none", s1.StateEncryption)
	assert.True(t, fileContains(t, m.disk, []byte(key.authorized)), "a plain STATE holds the admin's key")
	st := m.inspectState()
	uuid1 := st.fsUUID()
	marker := st.readFile("/terrarium/created")
	require.Contains(t, marker, "created=", "STATE marker after the first boot")
	require.Contains(t, st.readFile("/terrarium/machine.yaml"), "hostname: node-1", "the stored config after the first boot")
	badClusterConfigsLeftNothing(t, st)

	// The stick is gone, the disk enlarged by 1 GiB (a VM's disk
	// resized): TERRA-STATE and its filesystem grow into it. And the CMOS
	// battery is flat: the RTC reads 1990 (which the guest reads as 2090
	// and systemd resets to its own build time); the clock is stepped to
	// the last time the node state recorded before anything else, and the
	// step says what the hardware clock read.
	stateBefore := st.size
	out, err := exec.Command("qemu-img", "resize", "-q", m.disk, "+1G").CombinedOutput()
	require.NoError(t, err, "qemu-img resize: %s", out)
	m.rtcBase = "1990-01-01T00:00:00"
	poweredOn := time.Now()
	vm = m.boot(ctx)
	expect(ctx, t, vm, `terrarium-init: TERRA-STATE found on /dev/vda5`)
	expect(ctx, t, vm, `terrarium-init: grew TERRA-STATE /dev/vda5 from \d+ MiB to \d+ MiB`)
	expect(ctx, t, vm, `terrarium-init: grew TERRA-STATE's filesystem from \d+ MiB to \d+ MiB`)
	expect(ctx, t, vm, `terrarium: TERRA-STATE: NOT encrypted: it was made without encryption \(on a machine without a TPM 2\.0, or by an earlier release\)`)
	// expect reads on from the last match: the initramfs speaks before
	// firstboot steps the clock.
	stepped := expect(ctx, t, vm, `time: stepped: the clock read (\S+) \(the hardware clock read (\S+)\), before the last step this node recorded; stepped forward to (\S+),`)
	t.Logf("clock read %s (hardware clock %s), stepped to %s", stepped[1], stepped[2], stepped[3])
	rtc, err := time.Parse(time.RFC3339, stepped[2])
	require.NoError(t, err)
	assert.True(t, rtc.Year() == 1990 || rtc.Year() == 2090, "the hardware clock read %s: 1990, or 2090 through the firmware", rtc)
	to, err := time.Parse(time.RFC3339, stepped[3])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), to, time.Hour, "stepped to the first boot's last step, minutes ago")
	s2 := expectStatus(ctx, t, vm, "verified", "provisioned", "failed", "waiting-for-config")
	t.Logf("enrolled node without its stick: power-on to verified in %s", time.Since(poweredOn).Round(time.Second))
	require.Equal(t, "verified", s2.State, "%+v", s2)
	assert.Equal(t, "verify", s2.Mode)
	assert.Equal(t, 2, s2.Boot)
	assert.Equal(t, "node-1", s2.Hostname)
	assert.Equal(t, s1.StateCreated, s2.StateCreated)
	assert.Equal(t, "good", s2.Blessed)
	assert.True(t, s2.Healthy != nil && *s2.Healthy, "second boot healthy")
	assert.Equal(t, s1.Enrolled, s2.Enrolled)
	assert.Regexp(t, enrolledBanner, vm.Console(), "the banner says where the node enrolled")

	// Any stick with another config, unsigned: refused.
	admin := dialSSH(ctx, t, port, key)
	before := unitStarts(t, admin)
	intruder := m.configDisk("intruder.img", adminConfig("intruder", key.authorized, trust))
	require.NoError(t, vm.HotplugDisk(ctx, stick(intruder)), "hot-plug the unsigned stick")
	expect(ctx, t, vm, `config change from \S+ REFUSED: nothing changed`)
	expect(ctx, t, vm, `it is not signed`)
	still, err := admin.read("hostname")
	require.NoError(t, err)
	assert.Equal(t, "node-1", strings.TrimSpace(still), "the refused stick changed the hostname")
	require.NoError(t, vm.UnplugDisk(ctx, "stick"), "pull the unsigned stick")

	// A signed stick: the change is applied in place.
	changed := strings.Replace(adminConfig("node-2", key.authorized, trust), "name: admin", "name: ops", 1)
	changed = strings.Replace(changed, "kind: MachineConfig\n", "kind: MachineConfig\ngeneration: 1\n", 1)
	require.Contains(t, changed, "generation: 1\n", "a signed change carries a generation")
	require.NoError(t, vm.HotplugDisk(ctx, stick(m.signedDisk("signed.img", changed, signKey))), "hot-plug the signed stick")
	expect(ctx, t, vm, `config change from \S+, generation 1, signed by `+pub.ID()+` .*: accepted`)
	s3 := expectStatus(ctx, t, vm, "changed", "failed")
	require.Equal(t, "changed", s3.State, "%+v", s3)
	assert.Equal(t, "node-2", s3.Hostname)
	assert.Contains(t, s3.Enrolled, "changed from")
	assert.True(t, s3.Healthy != nil && *s3.Healthy, "healthy after the change")
	ops, err := trySSHAs(ctx, t, port, key, "ops")
	require.NoError(t, err, "the new admin logs in")
	assert.Equal(t, before, unitStarts(t, ops), "containerd and the registry were not restarted")
	host, err := ops.read("hostname")
	require.NoError(t, err)
	assert.Equal(t, "node-2", strings.TrimSpace(host))
	out2, err := ops.read("id admin")
	assert.Error(t, err, "the removed admin is gone: %s", out2)
	_, err = ops.read("test ! -e /home/admin")
	assert.NoError(t, err, "its home is gone")
	assert.NotRegexp(t, `formatting TERRA-STATE .* \(reason`, vm.Console(), "no later boot formats STATE")

	// Support sticks: written through the stick service's sandbox.
	checkStickService(ctx, t, vm, ops, t.TempDir())
	require.NoError(t, vm.Quit(ctx))

	st = m.inspectState()
	// What STATE holds, when a check below fails (inspectState replays
	// STATE's journal first; without that files can read empty).
	held := func() string {
		return "/etc/upper:\n" + st.debugfs("ls -l /etc/upper") + "\n/terrarium:\n" + st.debugfs("ls -l /terrarium")
	}
	assert.Equal(t, int64(1<<30), st.size-stateBefore, "TERRA-STATE grew by 1 GiB")
	if fs := st.fsBytes(); fs > st.size || st.size-fs > 4<<20 {
		t.Errorf("STATE's filesystem is %d bytes on a %d-byte partition: not grown to it", fs, st.size)
	}
	assert.Equal(t, uuid1, st.fsUUID(), "STATE's filesystem is the first boot's")
	assert.Equal(t, marker, st.readFile("/terrarium/created"), "STATE's marker is the first boot's")
	assert.Equal(t, "node-2\n", st.readFile("/etc/upper/hostname"), held())
	assert.Contains(t, st.readFile("/terrarium/machine.yaml"), "hostname: node-2", held())
	journal := st.readFile("/terrarium/journal.json")
	// Boot 2 verified its phases, then took the change: its mode is the
	// change's.
	for _, want := range []string{`"mode": "provision"`, `"mode": "change"`, `"result": "verified"`, `"result": "refused"`, `"signedBy": "` + pub.ID() + `"`} {
		assert.Contains(t, journal, want, "the journal records it")
	}
	n := checkCapture(t, m.capture, testSubnet)
	t.Logf("network capture: %d packets, all inside %s", n, testSubnet)
	assert.NotZero(t, n, "captured no packets at all: DHCP should have been seen")
}
