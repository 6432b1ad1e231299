package qemu

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// args returns QEMU's arguments (without the binary) for a Config that has
// been through withDefaults.
func (c Config) args() []string {
	machine := "q35"
	if c.SecureBoot {
		machine += ",smm=on"
	}
	a := []string{
		"-machine", machine,
		"-accel", "tcg",
		"-cpu", c.CPUModel,
		"-m", strconv.Itoa(c.MemoryMiB),
		"-smp", strconv.Itoa(c.CPUs),
	}
	if c.InstructionClock {
		a = append(a, "-icount", "shift=0,sleep=on")
	}
	a = append(a,
		"-nodefaults",
		"-no-user-config",
		"-display", "none",
	)
	if c.SecureBoot {
		// Only SMM may write the variable store: the guest cannot
		// enroll keys behind the firmware's back.
		a = append(a, "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	if !c.BIOS { // without flash, QEMU's own SeaBIOS
		a = append(a,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+escape(c.OVMFCode),
			"-drive", "if=pflash,format=raw,unit=1,file="+escape(filepath.Join(c.Dir, VarsFile)),
		)
	}
	a = append(a, "-device", "qemu-xhci,id=xhci")
	for i := range c.HotplugPorts {
		a = append(a, "-device", fmt.Sprintf("pcie-root-port,id=%s,chassis=%d", hotplugPort(i), i+1))
	}
	a = append(a,
		"-serial", "stdio",
		"-qmp", "unix:"+escape(filepath.Join(c.Dir, QMPSocket))+",server=on,wait=off",
	)
	cds := 0
	for _, d := range c.Disks {
		for _, node := range d.blockdevs() {
			a = append(a, "-blockdev", mustJSON(node))
		}
		bus := ""
		if d.Bus == BusCDROM {
			bus = fmt.Sprintf("ide.%d", cds) // one drive per AHCI port
			cds++
		}
		a = append(a, "-device", d.deviceArg(bus))
	}
	if c.TPM {
		a = append(a,
			"-chardev", "socket,id=chrtpm,path="+escape(filepath.Join(c.Dir, TPMSocket)),
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
			"-device", "tpm-crb,tpmdev=tpm0",
		)
	}
	a = append(a, c.Network.args(0)...)
	if c.Link != nil {
		a = append(a, c.Link.args(1)...)
	}
	for _, f := range c.FwCfg {
		v := "name=" + escape(f.Name)
		if f.File != "" {
			v += ",file=" + escape(f.File)
		} else {
			v += ",string=" + escape(f.String)
		}
		a = append(a, "-fw_cfg", v)
	}
	return append(a, c.ExtraArgs...)
}

func hotplugPort(i int) string { return "hp" + strconv.Itoa(i) }

// escape doubles commas, QEMU's escape in option values.
func escape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of strings and bools are marshalled
	}
	return string(b)
}

func (d Disk) fileNode() string   { return d.ID + "-file" }
func (d Disk) formatNode() string { return d.ID + "-fmt" }

// blockdevs returns the protocol node and the format node on top of it, as
// blockdev-add arguments (also usable as -blockdev JSON).
func (d Disk) blockdevs() []map[string]any {
	return []map[string]any{
		{"driver": "file", "node-name": d.fileNode(), "filename": d.Path, "read-only": d.ReadOnly},
		{"driver": d.Format, "node-name": d.formatNode(), "file": d.fileNode(), "read-only": d.ReadOnly},
	}
}

// deviceProps returns the device_add properties for d; bus is the parent
// bus for PCI disks ("" for the default).
func (d Disk) deviceProps(bus string) map[string]string {
	p := map[string]string{"id": d.ID, "drive": d.formatNode()}
	switch d.Bus {
	case BusUSB:
		p["driver"] = "usb-storage"
		p["bus"] = "xhci.0"
	case BusNVMe:
		p["driver"] = "nvme"
	case BusCDROM:
		p["driver"] = "ide-cd"
	default:
		p["driver"] = "virtio-blk-pci"
	}
	if bus != "" && d.Bus != BusUSB {
		p["bus"] = bus
	}
	if d.Serial != "" {
		p["serial"] = d.Serial
	}
	if d.BootIndex > 0 {
		p["bootindex"] = strconv.Itoa(d.BootIndex)
	}
	return p
}

// deviceArg renders deviceProps as a -device value.
func (d Disk) deviceArg(bus string) string {
	p := d.deviceProps(bus)
	parts := []string{p["driver"]}
	for _, k := range []string{"bus", "id", "drive", "serial", "bootindex"} {
		if v, ok := p[k]; ok {
			parts = append(parts, k+"="+escape(v))
		}
	}
	return strings.Join(parts, ",")
}

func (n Network) args(i int) []string {
	if n.Mode == NetNone {
		if i > 0 {
			return nil
		}
		return []string{"-nic", "none"}
	}
	id := fmt.Sprintf("net%d", i)
	dev := fmt.Sprintf("virtio-net-pci,netdev=%s,id=nic%d,romfile=", id, i)
	if n.MAC != "" {
		dev += ",mac=" + n.MAC
	}
	netdev := "user,id=" + id + ",restrict=on"
	for _, f := range n.Forward {
		netdev += ",hostfwd=" + f
	}
	switch n.Mode {
	case NetListen:
		netdev = "socket,id=" + id + ",listen=" + n.Peer
	case NetConnect:
		netdev = "socket,id=" + id + ",connect=" + n.Peer
	case NetMulticast:
		netdev = "socket,id=" + id + ",mcast=" + n.Peer + ",localaddr=127.0.0.1"
	}
	a := []string{"-netdev", netdev, "-device", dev}
	if n.Capture != "" {
		a = append(a, "-object", fmt.Sprintf("filter-dump,id=dump%d,netdev=%s,file=%s", i, id, escape(n.Capture)))
	}
	return a
}

// argv is the command line that starts QEMU, under nice(1) if Nice is set.
func (c Config) argv() []string {
	argv := append([]string{c.Binary}, c.args()...)
	if c.Nice > 0 {
		argv = append([]string{"nice", "-n", strconv.Itoa(c.Nice)}, argv...)
	}
	return argv
}
