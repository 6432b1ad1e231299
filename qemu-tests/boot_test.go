package qemutests

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

var testSubnet = &net.IPNet{IP: net.IPv4(10, 0, 2, 0), Mask: net.CIDRMask(24, 32)}

// TestProvisionThenReboot: first boot provisions from the attached config
// disk, enrolls and blesses the boot; the power is cut. The second boot has
// no config disk: it finds STATE intact (same filesystem, marker from the
// first boot), runs from the stored config and only verifies. An unsigned
// stick with another config, plugged into it, is refused, and nothing
// changes (checked on the stopped disk).
func TestProvisionThenReboot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	cfg := m.configDisk("config.img", goodConfig)

	vm := m.boot(ctx, configAttached(cfg))
	expect(ctx, t, vm, `terrarium-init: created TERRA-STATE`)
	expect(ctx, t, vm, `formatting TERRA-STATE .* \(reason: new partition\)`)
	expect(ctx, t, vm, `hostname\s+node-1`)
	s1 := expectStatus(ctx, t, vm, "provisioned", "failed")
	if s1.State != "provisioned" || s1.Mode != "provision" || s1.Hostname != "node-1" || s1.Boot != 1 {
		t.Fatalf("first boot status = %+v, want provisioned node-1 on boot 1", s1)
	}
	if s1.Healthy == nil || !*s1.Healthy || s1.Blessed != "blessed" {
		t.Fatalf("first boot not blessed: %+v", s1)
	}
	if len(s1.Addresses) == 0 || !strings.HasPrefix(s1.Addresses[0], "10.0.2.") {
		t.Errorf("first boot addresses = %v, want a DHCP address in 10.0.2.0/24", s1.Addresses)
	}
	if !strings.HasPrefix(s1.Enrolled, "from /dev/disk/by-label/TERRA-CONFI") {
		t.Errorf("first boot enrolled = %q", s1.Enrolled)
	}
	// QMP quit: the power is cut, nothing is shut down.
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	st := m.inspectState()
	uuid1 := st.fsUUID()
	marker := st.readFile("/terrarium/created")
	if !strings.Contains(marker, "created=") {
		t.Fatalf("STATE marker missing after first boot: %q", marker)
	}
	stored := st.readFile("/terrarium/machine.yaml")
	if !strings.Contains(stored, "hostname: node-1") {
		t.Fatalf("no stored config after the first boot: %q", stored)
	}

	// The stick is removed, and the disk enlarged by 1 GiB (a VM's disk
	// resized): TERRA-STATE and its filesystem grow into it.
	stateBefore := st.size
	if out, err := exec.Command("qemu-img", "resize", "-q", m.disk, "+1G").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img resize: %v: %s", err, out)
	}
	poweredOn := time.Now()
	vm = m.boot(ctx)
	expect(ctx, t, vm, `terrarium-init: TERRA-STATE found on /dev/vda4`)
	expect(ctx, t, vm, `terrarium-init: grew TERRA-STATE /dev/vda4 from \d+ MiB to \d+ MiB`)
	expect(ctx, t, vm, `terrarium-init: grew TERRA-STATE's filesystem from \d+ MiB to \d+ MiB`)
	s2 := expectStatus(ctx, t, vm, "verified", "provisioned", "failed", "waiting-for-config")
	t.Logf("enrolled node without its stick: power-on to verified in %s", time.Since(poweredOn).Round(time.Second))
	if s2.State != "verified" || s2.Mode != "verify" || s2.Boot != 2 || s2.Hostname != "node-1" {
		t.Fatalf("second boot status = %+v, want verified node-1 on boot 2", s2)
	}
	if s2.StateCreated != s1.StateCreated || s2.Blessed != "good" || s2.Healthy == nil || !*s2.Healthy {
		t.Fatalf("second boot: stateCreated %q (first %q), blessed %q (want good), healthy %v", s2.StateCreated, s1.StateCreated, s2.Blessed, s2.Healthy)
	}
	if s2.Enrolled != s1.Enrolled || !enrolledBanner.MatchString(vm.Console()) {
		t.Fatalf("second boot enrolled = %q (first %q); the banner must say it", s2.Enrolled, s1.Enrolled)
	}

	// Any stick with another config, unsigned: refused.
	intruder := m.configDisk("intruder.img", strings.Replace(goodConfig, "node-1", "intruder", 1))
	if err := vm.HotplugDisk(ctx, stick(intruder)); err != nil {
		t.Fatalf("hot-plug stick: %v", err)
	}
	expect(ctx, t, vm, `config change from \S+ REFUSED: nothing changed`)
	expect(ctx, t, vm, `it is not signed`)
	if strings.Contains(vm.Console(), "formatting TERRA-STATE") {
		t.Fatal("second boot formatted TERRA-STATE")
	}
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	st = m.inspectState()
	if st.size-stateBefore != 1<<30 {
		t.Errorf("TERRA-STATE grew from %d to %d bytes, want 1 GiB more", stateBefore, st.size)
	}
	if fs := st.fsBytes(); fs > st.size || st.size-fs > 4<<20 {
		t.Errorf("STATE's filesystem is %d bytes on a %d-byte partition: not grown to it", fs, st.size)
	}
	if uuid2 := st.fsUUID(); uuid2 != uuid1 {
		t.Fatalf("STATE filesystem changed across reboot: %s -> %s", uuid1, uuid2)
	}
	if got := st.readFile("/terrarium/created"); got != marker {
		t.Fatalf("STATE marker changed: %q -> %q", marker, got)
	}
	if got := st.readFile("/terrarium/machine.yaml"); got != stored {
		t.Errorf("the stored config changed:\n%s", got)
	}
	if got := st.readFile("/etc/upper/hostname"); got != "node-1\n" {
		t.Errorf("hostname on STATE = %q after a refused change", got)
	}
	journal := st.readFile("/terrarium/journal.json")
	for _, want := range []string{`"mode": "provision"`, `"mode": "verify"`, `"result": "verified"`, `"result": "refused"`} {
		if !strings.Contains(journal, want) {
			t.Errorf("journal lacks %s:\n%s", want, journal)
		}
	}
	n := checkCapture(t, m.capture, testSubnet)
	t.Logf("network capture: %d packets, all inside %s", n, testSubnet)
	if n == 0 {
		t.Error("captured no packets at all: DHCP should have been seen")
	}
}

// TestHotplugConfig: with no config disk the console asks for one; a USB
// stick plugged in later (over QMP) is found and provisioning completes.
func TestHotplugConfig(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	cfg := m.configDisk("config.img", goodConfig)

	vm := m.boot(ctx)
	expect(ctx, t, vm, `no config disk found: insert a disk or USB stick labelled TERRA-CONFIG`)
	if s := expectStatus(ctx, t, vm, "waiting-for-config"); s.Hostname != "" {
		t.Fatalf("waiting node already has a hostname: %+v", s)
	}
	if err := vm.HotplugDisk(ctx, qemu.Disk{ID: "stick", Path: cfg, Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}); err != nil {
		t.Fatalf("hot-plug config stick: %v", err)
	}
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	if s.State != "provisioned" || s.Hostname != "node-1" {
		t.Fatalf("after hot-plug: %+v", s)
	}
}
