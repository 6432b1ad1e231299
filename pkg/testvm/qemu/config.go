// Package qemu launches and drives QEMU virtual machines for integration
// tests: an x86_64 q35 machine under TCG with OVMF firmware, disks, an
// optional restricted user-mode network, a serial console that tests can
// match against, and a QMP connection for control and hot-plug.
package qemu

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
)

// Defaults used when the corresponding Config field is zero.
const (
	DefaultBinary   = "qemu-system-x86_64"
	DefaultOVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	DefaultOVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	// SecureBootOVMFCode is OVMF built with Secure Boot, run by
	// Config.SecureBoot. With DefaultOVMFVars (no keys) it starts in
	// setup mode.
	SecureBootOVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	DefaultMemoryMiB   = 2048
	DefaultCPUs        = 2
	// DefaultCPUModel is the emulated CPU. Under TCG the plain qemu64
	// boots the default image to "provisioned" faster than "max" (59 s
	// against 72 s, docs/benchmarks.md): the guest kernel and Go programs
	// pick AVX2, XSAVE and SSE4.2 code paths that TCG emulates more slowly
	// than the baseline ones. Named here so a QEMU whose default changes
	// does not change our figures. RDRAND, which every x86 server and NUC
	// of the last decade has, lets the guest kernel seed its random number
	// generator before it starts the second vCPU: without it the generator
	// became ready seconds into the boot, and patching the kernel's code
	// for that (a static key) while the other vCPU ran it hit a TCG race
	// now and then ("Oops: int3" in mix_interrupt_randomness, a fatal
	// oops; docs/operations/qemu-ci.md). CMPXCHG16B is taken away: under
	// multi-threaded TCG the guest kernel's slab allocator, which uses it
	// when the CPU has it, took double faults in cmpxchg16b during long
	// upgrade writes and panicked; without it the allocator takes its
	// lock instead, which x86-64 kernels and Go programs both support.
	DefaultCPUModel     = "qemu64,+rdrand,-cx16"
	DefaultHotplugPorts = 2
)

// Files inside Config.Dir.
const (
	VarsFile  = "efivars.fd"
	QMPSocket = "qmp.sock"
	// TPMDir holds a Config.TPM machine's TPM state, TPMSocket is its
	// control socket and TPMLog swtpm's log.
	TPMDir      = "tpm"
	TPMSocket   = "tpm.sock"
	TPMLog      = "swtpm.log"
	ConsoleFile = "console.log"
)

// Config describes a machine. Only Dir is required.
type Config struct {
	Binary   string // default DefaultBinary
	OVMFCode string // default DefaultOVMFCode
	// OVMFVars is the UEFI variable store template. It is copied to
	// Dir/efivars.fd only if that file does not exist yet, so a machine
	// restarted with the same Dir keeps its UEFI variables.
	OVMFVars string
	// SecureBoot runs OVMF's Secure Boot build (OVMFCode defaults to
	// SecureBootOVMFCode) on a machine with SMM, which keeps the variable
	// store out of the guest's reach: the firmware enforces Secure Boot
	// once a platform key is enrolled.
	SecureBoot bool
	// BIOS boots the machine with SeaBIOS, QEMU's legacy BIOS, instead of
	// OVMF: the firmware of Proxmox's and OpenStack's defaults and of old
	// plant PCs. It has no UEFI variables.
	BIOS bool
	// TPM gives the machine a TPM 2.0 (CRB): a swtpm, Debian's software
	// TPM, whose state lives in Dir/tpm, so that a machine restarted with
	// the same Dir keeps its TPM (its seeds, hence what it sealed) as it
	// keeps its UEFI variables. OVMF measures the boot into it.
	TPM       bool
	Dir       string // required: state dir (efivars.fd, qmp.sock, console.log)
	MemoryMiB int    // default DefaultMemoryMiB
	CPUs      int    // default DefaultCPUs
	CPUModel  string // -cpu; default DefaultCPUModel
	// InstructionClock makes the guest's clocks advance with the
	// instructions it executes while it runs, and with real time only
	// while it is idle (QEMU's -icount shift=0,sleep=on: one instruction
	// is one nanosecond of guest time). A guest starved of host CPU then
	// runs slow instead of watching its own timeouts expire: on a host
	// with fewer cores than its VMs need, each VM behaves like a slower
	// machine rather than one that loses seconds at random. The guest's
	// vCPUs share one host thread (icount rules out multi-threaded TCG),
	// and its wall clock falls behind the host's while it is busy; the
	// RTC still reads the host's time, so a guest that steps its clock
	// from /dev/rtc stays in step with its peers.
	InstructionClock bool
	// Nice, if positive, starts QEMU at that niceness (nice(1)): a VM that
	// shares the host's cores with a more important one yields to it.
	Nice    int
	Disks   []Disk // attached at start, in order
	Network Network
	// Link is an optional second NIC (e.g. a private link between two
	// VMs next to a restricted management network).
	Link  *Network
	FwCfg []FwCfg
	// HotplugPorts is the number of empty pcie-root-port devices (ids hp0,
	// hp1, ...) for hot-plugging virtio and NVMe disks. Default
	// DefaultHotplugPorts; negative means none.
	HotplugPorts int
	ExtraArgs    []string
	Logger       *slog.Logger // default: discard
}

// Bus is how a disk is attached.
type Bus int

// The buses a disk attaches to.
const (
	BusVirtio Bus = iota // virtio-blk-pci (default)
	BusUSB               // usb-storage on the qemu-xhci controller
	BusNVMe              // nvme; needs Disk.Serial
	BusCDROM             // ide-cd on the q35 AHCI controller: a CD-ROM drive (at start only)
)

func (b Bus) String() string {
	switch b {
	case BusVirtio:
		return "virtio"
	case BusUSB:
		return "usb"
	case BusNVMe:
		return "nvme"
	case BusCDROM:
		return "cdrom"
	}
	return fmt.Sprintf("Bus(%d)", int(b))
}

// Disk is a disk image attached to the machine.
type Disk struct {
	// ID is the QEMU device id; the block nodes are ID-file and ID-fmt.
	// Default for Config.Disks: "disk<index>". Required for HotplugDisk.
	ID       string
	Path     string
	Format   string // "raw" or "qcow2"; required, never probed
	Bus      Bus
	ReadOnly bool
	Serial   string
	// BootIndex > 0 puts the disk in QEMU's boot order (1 first), which
	// OVMF applies to its boot options at every boot; 0 leaves it out.
	BootIndex int
}

// NetMode selects the network setup.
type NetMode int

const (
	// NetNone gives the machine no NIC at all.
	NetNone NetMode = iota
	// NetRestricted is user-mode networking with restrict=on: the guest gets
	// DHCP from QEMU on 10.0.2.0/24 but has no route out of the VM.
	NetRestricted
	// NetListen and NetConnect join two VMs on a private point-to-point
	// Ethernet link (a TCP socket between the QEMU processes on loopback):
	// no DHCP, no router, no route out. One VM listens on Peer
	// (127.0.0.1:port), the other connects to it.
	NetListen
	// NetConnect is the end of a NetListen link that connects to Peer.
	NetConnect
	// NetMulticast joins any number of VMs on one private Ethernet segment
	// (UDP multicast on the host's loopback, group:port in Peer, e.g.
	// 230.0.77.1:7701): no DHCP, no router, no route out.
	NetMulticast
)

// Network configures the machine's single NIC (virtio-net-pci, no option ROM).
type Network struct {
	Mode NetMode
	MAC  string // optional
	// Capture, if set, is a pcap file receiving every packet on the netdev
	// (filter-dump), so tests can prove nothing left the test subnet.
	Capture string
	// Peer is the loopback address of the link (NetListen, NetConnect).
	Peer string
	// Forward holds QEMU hostfwd rules for NetRestricted, e.g.
	// "tcp:127.0.0.1:2222-:22": the host reaches a guest port; the guest
	// still has no route out.
	Forward []string
}

// FwCfg is a -fw_cfg item: exactly one of File and String is set. Name
// should start with "opt/".
type FwCfg struct {
	Name   string
	File   string
	String string
}

// idRE accepts ids that are valid as QEMU device ids and, with the "-file"
// suffix, as block node names (at most 31 characters).
var idRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,25}$`)

var macRE = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)

// maxSocketPath is the limit of sockaddr_un.sun_path, including the NUL.
const maxSocketPath = 108

// withDefaults returns cfg with defaults filled in, or an error if cfg is
// invalid.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("config: Dir is required")
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("config: Dir: %w", err)
	}
	c.Dir = dir
	for _, sock := range []string{QMPSocket, TPMSocket} {
		if n := len(filepath.Join(c.Dir, sock)); n >= maxSocketPath {
			return c, fmt.Errorf("config: Dir %s is too long for a unix socket path (%d bytes)", c.Dir, n)
		}
	}
	c.Binary = orDefault(c.Binary, DefaultBinary)
	if c.BIOS && (c.SecureBoot || c.OVMFCode != "" || c.OVMFVars != "") {
		return c, fmt.Errorf("config: BIOS boots SeaBIOS: it has no Secure Boot and no OVMF")
	}
	if c.SecureBoot {
		c.OVMFCode = orDefault(c.OVMFCode, SecureBootOVMFCode)
	}
	c.OVMFCode = orDefault(c.OVMFCode, DefaultOVMFCode)
	c.OVMFVars = orDefault(c.OVMFVars, DefaultOVMFVars)
	c.CPUModel = orDefault(c.CPUModel, DefaultCPUModel)
	if c.MemoryMiB == 0 {
		c.MemoryMiB = DefaultMemoryMiB
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.MemoryMiB < 0 || c.CPUs < 0 {
		return c, fmt.Errorf("config: negative MemoryMiB %d or CPUs %d", c.MemoryMiB, c.CPUs)
	}
	if c.Nice < 0 || c.Nice > 19 {
		return c, fmt.Errorf("config: Nice %d is outside 0..19", c.Nice)
	}
	switch {
	case c.HotplugPorts == 0:
		c.HotplugPorts = DefaultHotplugPorts
	case c.HotplugPorts < 0:
		c.HotplugPorts = 0
	}
	disks := make([]Disk, len(c.Disks))
	seen := map[string]bool{}
	for i, d := range c.Disks {
		if d.ID == "" {
			d.ID = fmt.Sprintf("disk%d", i)
		}
		if err := d.validate(); err != nil {
			return c, fmt.Errorf("config: disk %d: %w", i, err)
		}
		if seen[d.ID] {
			return c, fmt.Errorf("config: disk %d: duplicate id %q", i, d.ID)
		}
		seen[d.ID] = true
		disks[i] = d
	}
	c.Disks = disks
	if c.Link != nil {
		if err := c.Link.validate(); err != nil {
			return c, fmt.Errorf("link: %w", err)
		}
	}
	if err := c.Network.validate(); err != nil {
		return c, fmt.Errorf("config: network: %w", err)
	}
	for i, f := range c.FwCfg {
		if f.Name == "" || (f.File == "") == (f.String == "") {
			return c, fmt.Errorf("config: fw_cfg %d (%q): need a Name and exactly one of File and String", i, f.Name)
		}
	}
	return c, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (d Disk) validate() error {
	if !idRE.MatchString(d.ID) {
		return fmt.Errorf("id %q: want a letter then up to 25 letters, digits, '-', '.', '_'", d.ID)
	}
	if d.Path == "" {
		return fmt.Errorf("%s: Path is required", d.ID)
	}
	if d.Format != "raw" && d.Format != "qcow2" {
		return fmt.Errorf("%s: Format %q: want raw or qcow2", d.ID, d.Format)
	}
	switch d.Bus {
	case BusVirtio, BusUSB:
	case BusCDROM:
		if !d.ReadOnly || d.Format != "raw" {
			return fmt.Errorf("%s: a CD-ROM is a read-only raw image (ISO 9660)", d.ID)
		}
	case BusNVMe:
		if d.Serial == "" {
			return fmt.Errorf("%s: NVMe disks need a Serial", d.ID)
		}
	default:
		return fmt.Errorf("%s: unknown bus %v", d.ID, d.Bus)
	}
	return nil
}

func (n Network) validate() error {
	switch n.Mode {
	case NetNone:
		if n.MAC != "" || n.Capture != "" {
			return errors.New("MAC and Capture need Mode NetRestricted")
		}
	case NetRestricted, NetListen, NetConnect, NetMulticast:
		if n.MAC != "" && !macRE.MatchString(n.MAC) {
			return fmt.Errorf("MAC %q: want xx:xx:xx:xx:xx:xx", n.MAC)
		}
		if (n.Mode == NetRestricted) != (n.Peer == "") {
			return errors.New("a Peer is needed by NetListen, NetConnect and NetMulticast, and by no other mode")
		}
	default:
		return fmt.Errorf("unknown mode %d", int(n.Mode))
	}
	return nil
}
