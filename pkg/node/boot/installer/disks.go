package installer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

// Disk is a whole disk of the machine.
type Disk struct {
	Name      string // kernel name, e.g. "vda"
	Size      int64  // bytes
	Serial    string
	Links     []string // its /dev/disk/by-path/ and /dev/disk/by-id/ links
	Removable bool
	Optical   bool
	// SectorSize is the logical sector size (0: unknown).
	SectorSize int64
}

// Dev is the disk's device node.
func (d Disk) Dev() string { return "/dev/" + d.Name }

// String names the disk for a person: device, size, serial.
func (d Disk) String() string {
	s := fmt.Sprintf("%s (%s", d.Dev(), humanSize(d.Size))
	if d.Serial != "" {
		s += ", serial " + d.Serial
	}
	return s + ")"
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%d MiB", n>>20)
	}
}

// List returns the machine's whole disks, by kernel name: sysBlock is
// /sys/class/block, devDisk /dev/disk (whose by-path and by-id links name
// them), udevData /run/udev/data (where udev keeps the serial numbers it
// read, as lsblk shows them). Partitions, loop, RAM and device-mapper
// devices are left out.
func List(sysBlock, devDisk, udevData string) ([]Disk, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	links := diskLinks(devDisk)
	var out []Disk
	for _, e := range entries {
		n := e.Name()
		dir := filepath.Join(sysBlock, n)
		if skipDevice(n) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
			continue
		}
		d := Disk{Name: n, Optical: strings.HasPrefix(n, "sr"), Links: links[n]}
		if b, err := os.ReadFile(filepath.Join(dir, "size")); err == nil {
			if sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				d.Size = sectors * 512 // the kernel counts 512-byte sectors here
			}
		}
		if b, err := os.ReadFile(filepath.Join(dir, "removable")); err == nil {
			d.Removable = strings.TrimSpace(string(b)) == "1"
		}
		d.Serial = serial(dir, udevData)
		if b, err := os.ReadFile(filepath.Join(dir, "queue", "logical_block_size")); err == nil {
			d.SectorSize, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func skipDevice(n string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-", "md", "nbd"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// diskLinks maps kernel names to their by-path and by-id links, written
// as the machine config names them (/dev/disk/by-path/...).
func diskLinks(devDisk string) map[string][]string {
	out := map[string][]string{}
	for _, kind := range []struct{ dir, prefix string }{
		{"by-path", machineconfig.DiskByPath}, {"by-id", machineconfig.DiskByID},
	} {
		entries, err := os.ReadDir(filepath.Join(devDisk, kind.dir))
		if err != nil {
			continue
		}
		for _, e := range entries {
			target, err := os.Readlink(filepath.Join(devDisk, kind.dir, e.Name()))
			if err != nil {
				continue
			}
			name := filepath.Base(target)
			out[name] = append(out[name], kind.prefix+e.Name())
		}
	}
	for _, l := range out {
		sort.Strings(l)
	}
	return out
}

// serial reads the serial number a disk reports: virtio and NVMe in
// sysfs files, SCSI and ATA (through libata) in VPD page 0x80, USB sticks
// (whose bridges seldom answer VPD) in udev's record of the device.
func serial(dir, udevData string) string {
	for _, f := range []string{"serial", "device/serial"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" {
				return s
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "device", "vpd_pg80")); err == nil {
		if s, err := parseVPD80(b); err == nil && s != "" {
			return s
		}
	}
	dev, err := os.ReadFile(filepath.Join(dir, "dev"))
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(udevData, "b"+strings.TrimSpace(string(dev))))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "E:ID_SERIAL_SHORT="); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parseVPD80 reads the Unit Serial Number VPD page: byte 1 is the page
// code 0x80, bytes 2-3 the length of the serial that follows.
func parseVPD80(b []byte) (string, error) {
	if len(b) < 4 || b[1] != 0x80 {
		return "", errors.New("not a unit serial number page")
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if 4+n > len(b) {
		return "", errors.New("unit serial number page truncated")
	}
	return strings.Trim(string(b[4:4+n]), " \x00"), nil
}

// Installed returns the disks that hold an installed Terrarium (an EFI
// partition and slot A, by GPT partition name, as the kernel reports them
// in sysBlock's uevent files): the installer never writes over one.
func Installed(sysBlock string) (map[string]bool, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	labels := map[string]map[string]bool{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "uevent"))
		if err != nil {
			continue
		}
		var name string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PARTNAME="); ok {
				name = v
			}
		}
		target, err := os.Readlink(filepath.Join(sysBlock, e.Name()))
		if name == "" || err != nil {
			continue
		}
		disk := filepath.Base(filepath.Dir(target))
		if labels[disk] == nil {
			labels[disk] = map[string]bool{}
		}
		labels[disk][name] = true
	}
	out := map[string]bool{}
	for disk, l := range labels {
		if l[layout.LabelESP] && l[layout.LabelSlotA] {
			out[disk] = true
		}
	}
	return out, nil
}
