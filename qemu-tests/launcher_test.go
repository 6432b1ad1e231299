// Package qemutests boots real Terrarium images in QEMU (UEFI via OVMF,
// TCG: no KVM here) and asserts what a person at the console would see.
//
// Fixtures, set by `make qemu-test`:
//
//	TERRARIUM_IMAGE  the default image (qcow2) built by `make image`
//	TERRARIUM_ISO    the same build's hybrid ISO
//	TERRARIUM_OVA    the same build's OVA
//	TERRARIUM_BIN    the directory holding imagebuild, firstboot, terrarium-init
//
// Each machine boots from a copy-on-write qcow2 overlay of the image, grown
// to 8 GiB so the initramfs has room to create TERRA-STATE; config disks are
// FAT images written by pkg/cluster/configdisk; the network, when present, is
// QEMU's restricted user network (10.0.2.0/24, no route out), captured to a
// pcap file that the tests read to prove nothing left the subnet.
package qemutests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/node/status"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// Boot timeouts under TCG: a boot to the banner takes about a minute here.
const (
	bootTimeout = 6 * time.Minute
	diskSize    = "8G"
)

func fixture(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run these tests with `make qemu-test` (it builds the image first)", name)
	}
	return v
}

// machine is one test machine: its state dir, boot disk and config disk.
type machine struct {
	t       testing.TB
	dir     string
	disk    string
	capture string
	// net is the management NIC: QEMU's restricted network (DHCP, no
	// route out), captured; forward holds hostfwd rules into it.
	mac     string
	forward []string
	// link is an optional second NIC on a private link to another VM.
	link *qemu.Network
	// fwCfg are QEMU fw_cfg entries (a machine config for the qemu-fw_cfg
	// config source).
	fwCfg []qemu.FwCfg
	// memMiB is the VM's memory; 0 is QEMU's default here (2 GiB).
	memMiB int
	// cpus is the VM's vCPU count (0: the qemu package's default, 2) and
	// nice its QEMU's niceness: a worker VM that shares the host's two
	// cores with a control-plane VM gets one vCPU and yields, as it would
	// have its own CPU on real hardware.
	cpus, nice int
	// instructionClock runs the VM on QEMU's instruction clock
	// (qemu.Config.InstructionClock): for more VMs than the host has
	// cores, each a slower machine instead of one that misses its own
	// timeouts.
	instructionClock bool
	// rtcBase starts the VM's RTC at this time ("" is the host's).
	rtcBase string
	// iso is the build's ISO attached first in the firmware's boot order
	// (nil for none); the disk then comes second (diskBootIndex), as on a
	// machine whose firmware boots USB sticks and CDs first.
	iso           *qemu.Disk
	diskBootIndex int
	// secureBoot runs OVMF's Secure Boot build (qemu.Config.SecureBoot).
	secureBoot bool
	// tpm gives the machine a TPM 2.0 (qemu.Config.TPM), kept in its
	// directory across its boots.
	tpm bool
	// bios boots it with SeaBIOS instead of OVMF (qemu.Config.BIOS).
	bios bool
}

// newMachine makes an 8 GiB copy-on-write boot disk over image (a qcow2,
// or a VMDK when its name ends so).
func newMachine(t testing.TB, image string) *machine {
	t.Helper()
	dir := t.TempDir()
	m := &machine{t: t, dir: dir, disk: filepath.Join(dir, "boot.qcow2"), capture: filepath.Join(dir, "net.pcap")}
	format := "qcow2"
	if strings.HasSuffix(image, ".vmdk") {
		format = "vmdk"
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", format, "-b", image, m.disk, diskSize).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return m
}

// isoSerial is the serial number of the USB stick the ISO is on.
const isoSerial = "TERRAISO01"

// newLiveMachine makes a machine that boots iso, first in the firmware's
// boot order, from a CD-ROM drive (bus qemu.BusCDROM) or a USB stick the
// ISO was written to (qemu.BusUSB), with an empty 8 GiB virtio disk beside
// it.
func newLiveMachine(t testing.TB, iso string, bus qemu.Bus) *machine {
	t.Helper()
	dir := t.TempDir()
	m := &machine{t: t, dir: dir, disk: filepath.Join(dir, "empty.qcow2"), capture: filepath.Join(dir, "net.pcap"),
		iso: &qemu.Disk{ID: "iso", Path: iso, Format: "raw", ReadOnly: true, Bus: bus, BootIndex: 1}, diskBootIndex: 2}
	if bus == qemu.BusUSB {
		m.iso.Serial = isoSerial
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", m.disk, diskSize).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return m
}

// configDisk writes a config disk holding yaml as is (no validation, so
// tests can hand the node a bad config).
func (m *machine) configDisk(name, yaml string) string {
	m.t.Helper()
	p := filepath.Join(m.dir, name)
	if err := configdisk.Write(p, []byte(yaml)); err != nil {
		m.t.Fatal(err)
	}
	return p
}

// boot starts the machine with extra disks; it is stopped at test end.
func (m *machine) boot(ctx context.Context, extra ...qemu.Disk) *qemu.VM {
	m.t.Helper()
	disks := append([]qemu.Disk{{ID: "boot", Path: m.disk, Format: "qcow2", BootIndex: m.diskBootIndex}}, extra...)
	if m.iso != nil {
		disks = append(disks, *m.iso)
	}
	vm, err := qemu.Start(ctx, qemu.Config{
		Dir:              filepath.Join(m.dir, "vm"),
		MemoryMiB:        m.memMiB,
		CPUs:             m.cpus,
		Nice:             m.nice,
		Disks:            disks,
		InstructionClock: m.instructionClock,
		Network:          qemu.Network{Mode: qemu.NetRestricted, Capture: m.capture, MAC: m.mac, Forward: m.forward},
		Link:             m.link,
		FwCfg:            m.fwCfg,
		SecureBoot:       m.secureBoot,
		BIOS:             m.bios,
		TPM:              m.tpm,
		ExtraArgs:        m.extraArgs(),
	})
	if err != nil {
		m.t.Fatalf("start QEMU: %v", err)
	}
	m.t.Cleanup(func() {
		if m.t.Failed() {
			m.t.Logf("console log: %s", vm.ConsoleLog())
		}
		if err := vm.Close(); err != nil {
			m.t.Errorf("close QEMU: %v", err)
		}
	})
	return vm
}

// cutPower kills vm, as a power cut would, and waits until QEMU is gone.
// Killed, QEMU's exit is an error (signal: killed): what fails the test
// is a wait that ends with QEMU still there.
func cutPower(ctx context.Context, t testing.TB, vm *qemu.VM) {
	t.Helper()
	require.NoError(t, vm.Kill())
	if err := vm.Wait(ctx); vm.Running() {
		t.Fatalf("QEMU still runs after SIGKILL: %v", err)
	}
}

func (m *machine) extraArgs() []string {
	if m.rtcBase == "" {
		return nil
	}
	return []string{"-rtc", "base=" + m.rtcBase}
}

func configAttached(path string) qemu.Disk {
	return qemu.Disk{ID: "config", Path: path, Format: "raw", ReadOnly: true}
}

// statusRE matches a whole status line: Expect looks at the console as
// it arrives, so a pattern that could end at an inner "}" would match a
// line half sent.
var statusRE = regexp.MustCompile(`terrarium-status: (\{[^\n]*\})\n`)

// expectStatus waits for the next status line whose state is one of states.
func expectStatus(ctx context.Context, t *testing.T, vm *qemu.VM, states ...string) status.Status {
	t.Helper()
	for {
		m, err := vm.Expect(ctx, statusRE)
		if err != nil {
			t.Fatalf("waiting for status %v: %v", states, err)
		}
		var s status.Status
		if err := json.Unmarshal([]byte(m[1]), &s); err != nil {
			t.Fatalf("status line is not JSON: %v: %s", err, m[1])
		}
		for _, want := range states {
			if s.State == want {
				return s
			}
		}
		t.Logf("status %s (waiting for %v)", s.State, states)
	}
}

func expect(ctx context.Context, t *testing.T, vm *qemu.VM, pattern string) []string {
	t.Helper()
	m, err := vm.Expect(ctx, regexp.MustCompile(pattern))
	if err != nil {
		t.Fatalf("waiting for %q: %v", pattern, err)
	}
	return m
}

// expectWithin is expect bounded by d: a long scenario's step that never
// comes fails the test at once, not at the scenario's deadline.
func expectWithin(ctx context.Context, t *testing.T, vm *qemu.VM, d time.Duration, pattern string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return expect(ctx, t, vm, pattern)
}

// goodConfig provisions node-1 with DHCP and an admin whose key nobody
// holds (tests that log in use adminConfig with a key of their own).
var goodConfig = adminConfig("node-1", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl test@terrarium", "")

var statusProvisionedRE = regexp.MustCompile(`terrarium-status: \{[^\n]*"state":"provisioned"`)

// seen waits until the whole console so far matches re, wherever the
// Expect cursor is.
func seen(ctx context.Context, t testing.TB, vm *qemu.VM, re *regexp.Regexp) {
	t.Helper()
	for !re.MatchString(vm.Console()) {
		select {
		case <-ctx.Done():
			t.Fatalf("console never showed %q", re)
		case <-time.After(time.Second):
		}
	}
}

// yieldCPU gives the machine one vCPU at niceness 10: a worker next to
// control-plane VMs on the same two host cores (see cpus and nice).
func (m *machine) yieldCPU() { m.cpus, m.nice = 1, 10 }
