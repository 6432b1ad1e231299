package bootinit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"
	"golang.org/x/sys/unix"
)

// A live boot runs from the hybrid ISO: the slot is the squashfs file on
// the medium's ISO 9660 filesystem (mounted through a loop device), and
// TERRA-STATE is a disk's or a tmpfs, as CmdlineState says.

// live reports whether this boot came from the ISO's live entry.
func (in *Init) live() bool {
	_, ok := in.cmdline[layout.CmdlineLive]
	return ok
}

func (in *Init) liveSteps() []step {
	var medium string
	return []step{
		{"find the boot medium", func(ctx context.Context) (err error) { medium, err = in.findMedium(ctx); return err }},
		{"look for an installed system", func(ctx context.Context) error { return in.handOver(ctx, medium) }},
		{"mount the slot from the medium", func(ctx context.Context) error { return in.mountLiveSlot(medium) }},
		{"prepare TERRA-STATE", func(ctx context.Context) error { return in.ensureLiveState(ctx, medium) }},
		{"set up /etc and /var", in.mountOverlays},
	}
}

// The ISO 9660 primary volume descriptor: at sector 16 (of 2048 bytes),
// type 1, "CD001", version 1; the volume identifier is bytes 40..71,
// padded with spaces.
const (
	isoPVDOffset = 16 * 2048
	isoPVDLen    = 72
)

// errNotISO: the data holds no ISO 9660 primary volume descriptor.
var errNotISO = errors.New("no ISO 9660 primary volume descriptor")

// parseVolumeID returns the volume identifier of an ISO 9660 primary
// volume descriptor (the 72 bytes at isoPVDOffset).
func parseVolumeID(pvd []byte) (string, error) {
	if len(pvd) < isoPVDLen || pvd[0] != 1 || string(pvd[1:6]) != "CD001" || pvd[6] != 1 {
		return "", errNotISO
	}
	return strings.TrimRight(string(pvd[40:72]), " \x00"), nil
}

// volumeID reads the ISO 9660 volume identifier of a block device.
func volumeID(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, isoPVDLen)
	if _, err := f.ReadAt(b, isoPVDOffset); err != nil {
		return "", err
	}
	return parseVolumeID(b)
}

// blockDevice is one entry of /sys/class/block.
type blockDevice struct {
	name      string
	partition bool   // a partition, not a whole disk
	parent    string // the whole disk of a partition
}

// blockDevices lists sysBlock's devices that can hold a medium or STATE:
// whole disks first, then partitions, each by name. Loop, RAM and
// device-mapper devices are left out.
func blockDevices(sysBlock string) ([]blockDevice, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, err
	}
	var out []blockDevice
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "loop") || strings.HasPrefix(n, "ram") || strings.HasPrefix(n, "zram") || strings.HasPrefix(n, "dm-") {
			continue
		}
		d := blockDevice{name: n}
		if _, err := os.Stat(filepath.Join(sysBlock, n, "partition")); err == nil {
			d.partition = true
			if target, err := os.Readlink(filepath.Join(sysBlock, n)); err == nil {
				d.parent = filepath.Base(filepath.Dir(target))
			}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].partition != out[j].partition {
			return !out[i].partition
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// findMedium waits for the block device holding the ISO (a CD-ROM drive,
// or a USB stick the ISO was written to) and returns its kernel name.
func (in *Init) findMedium(ctx context.Context) (string, error) {
	deadline := time.Now().Add(in.partitionTimeout)
	for {
		devs, err := blockDevices("/sys/class/block")
		if err != nil {
			return "", err
		}
		for _, d := range devs {
			if id, err := volumeID("/dev/" + d.name); err == nil && id == layout.ISOVolumeID {
				in.say("boot medium /dev/%s (ISO 9660 volume %s)", d.name, id)
				return d.name, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no medium with the ISO 9660 volume ID %q appeared within %s (is the drive's module, e.g. sr_mod or usb_storage, in kernel.modules of the build spec?)", layout.ISOVolumeID, in.partitionTimeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// mountLiveSlot mounts the medium read-only on LiveMediumMount and the
// slot's squashfs from it on the new root.
func (in *Init) mountLiveSlot(medium string) error {
	mnt := layout.LiveMediumMount
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	dev := "/dev/" + medium
	if err := unix.Mount(dev, mnt, "iso9660", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount %s as ISO 9660: %w", dev, err)
	}
	file := filepath.Join(mnt, layout.ISOSlotFile)
	loop, err := attachLoop(file)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(in.sysroot, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(loop, in.sysroot, "squashfs", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s (%s on %s) as squashfs: %w (is the medium damaged? check it against the manifest's sha256)", loop, layout.ISOSlotFile, dev, err)
	}
	in.say("slot %s from %s on %s (%s)", in.slot(), layout.ISOSlotFile, dev, loop)
	return nil
}

// attachLoop attaches file, read-only, to a free loop device.
func attachLoop(file string) (string, error) {
	backing, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("open the slot on the medium: %w", err)
	}
	defer backing.Close() // the loop device holds its own reference
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("loop devices (is the loop module in kernel.modules?): %w", err)
	}
	defer ctl.Close()
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return "", fmt.Errorf("find a free loop device: %w", err)
	}
	dev := fmt.Sprintf("/dev/loop%d", n)
	lf, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer lf.Close()
	cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY
	copy(cfg.Info.File_name[:], file)
	if err := unix.IoctlLoopConfigure(int(lf.Fd()), &cfg); err != nil {
		return "", fmt.Errorf("attach %s to %s: %w", file, dev, err)
	}
	return dev, nil
}

// ensureLiveState gives a live boot its TERRA-STATE, as CmdlineState
// says: a TERRA-STATE of an earlier live boot (on a disk without a slot:
// an installed system's is never taken) when there is one; else, with
// "disk", a new one on the first empty disk; else a tmpfs, as live media
// of every kind do (the installer then has every disk to itself).
func (in *Init) ensureLiveState(ctx context.Context, medium string) error {
	mode := in.cmdline[layout.CmdlineState]
	switch mode {
	case "", layout.StateOnDisk, layout.StateInRAM:
	default:
		return fmt.Errorf("%s=%q: say %q or %q (fix the boot entry's options)", layout.CmdlineState, mode, layout.StateOnDisk, layout.StateInRAM)
	}
	if mode != layout.StateInRAM {
		disk, err := in.liveStateDisk(ctx, medium, mode == layout.StateOnDisk)
		if err != nil {
			return err
		}
		if disk != nil {
			return in.ensureStateFS(ctx, disk)
		}
		if mode == layout.StateOnDisk {
			return fmt.Errorf("%s=%s, but no disk holds a TERRA-STATE of a live boot and no disk is empty: attach an empty disk, or boot with %s=%s", layout.CmdlineState, mode, layout.CmdlineState, layout.StateInRAM)
		}
	}
	in.say("TERRA-STATE is in RAM: nothing this node does survives a reboot (boot with %s=%s to keep it on an empty disk, or install)", layout.CmdlineState, layout.StateOnDisk)
	mnt := filepath.Join(in.sysroot, layout.StateMount)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NODEV, "mode=0755"); err != nil {
		return &os.PathError{Op: "mount tmpfs", Path: mnt, Err: err}
	}
	return in.layoutState(ctx, mnt, true)
}

// liveStateDisk finds the disk for a live boot's STATE: one holding a
// TERRA-STATE but no slot, else (when create) the first empty disk, whose
// TERRA-STATE it creates, else nil. The medium's disk is never one.
func (in *Init) liveStateDisk(ctx context.Context, medium string, create bool) (*diskInfo, error) {
	devs, err := blockDevices("/sys/class/block")
	if err != nil {
		return nil, err
	}
	mediumDisk := medium
	for _, d := range devs {
		if d.name == medium && d.partition {
			mediumDisk = d.parent
		}
	}
	d, err := in.stateOnlyDisk(mediumDisk, "a live boot leaves it alone")
	if err != nil || d != nil || !create {
		return d, err
	}
	return in.takeEmptyDisk(ctx, devs, mediumDisk)
}

// stateOnlyDisk is the first disk, by kernel name, that holds a TERRA-STATE
// and no slot (a live boot's, or a VM's state disk), skip excepted; nil
// when there is none. A disk with an installed Terrarium is reported with
// why it is left alone.
func (in *Init) stateOnlyDisk(skip, whyNotInstalled string) (*diskInfo, error) {
	parts, err := scanPartitions("/sys/class/block")
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range parts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d := parts[name]
		if name == skip {
			continue
		}
		_, state := d.parts[layout.LabelState]
		_, slot := d.parts[layout.LabelSlotA]
		switch {
		case state && !slot && removable("/sys/class/block/"+name):
			in.say("/dev/%s holds a TERRA-STATE but is removable: left alone", name)
		case state && !slot:
			in.say("TERRA-STATE on a disk of its own: %s", d.dev())
			return d, nil
		case slot:
			in.say("/dev/%s holds an installed Terrarium: %s", name, whyNotInstalled)
		}
	}
	return nil, nil
}

// takeEmptyDisk creates TERRA-STATE on the first empty disk of devs, skip
// excepted (never a partition, an optical drive or a disk with a
// partition table); nil when none is empty.
func (in *Init) takeEmptyDisk(ctx context.Context, devs []blockDevice, skip string) (*diskInfo, error) {
	parts, err := scanPartitions("/sys/class/block")
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		if d.partition || d.name == skip || parts[d.name] != nil || strings.HasPrefix(d.name, "sr") {
			continue
		}
		if empty, err := emptyDisk("/dev/"+d.name, "/sys/class/block/"+d.name); err != nil || !empty {
			continue
		}
		in.say("/dev/%s is empty: it takes TERRA-STATE", d.name)
		return in.createStateDisk(ctx, d.name)
	}
	return nil, nil
}

// emptyBytes is how much of a disk must be zero for it to count as empty:
// its first MiB holds any partition table or filesystem signature.
const emptyBytes = layout.MiB

// removable reports whether the disk at sys (its /sys/class/block
// directory) says it is removable.
func removable(sys string) bool {
	b, err := os.ReadFile(filepath.Join(sys, "removable"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// emptyDisk reports whether a disk is empty (zeros where any partition
// table or filesystem would be), not removable, and big enough for STATE.
func emptyDisk(dev, sys string) (bool, error) {
	if removable(sys) {
		return false, nil
	}
	f, err := os.Open(dev)
	if err != nil {
		return false, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil || size < layout.MinStateSize+layout.Alignment+layout.GPTReserve {
		return false, err
	}
	b := make([]byte, emptyBytes)
	if _, err := f.ReadAt(b, 0); err != nil {
		return false, err
	}
	return allZero(b), nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// createStateDisk writes a GPT holding one TERRA-STATE partition, filling
// the disk, onto the empty disk name.
func (in *Init) createStateDisk(ctx context.Context, name string) (*diskInfo, error) {
	disk := &diskInfo{name: name, parts: map[string]string{}}
	d, err := diskfs.Open(disk.dev(), diskfs.WithOpenMode(diskfs.ReadWrite))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", disk.dev(), err)
	}
	defer d.Close()
	sector := uint64(d.LogicalBlocksize)
	start := uint64(layout.Alignment) / sector
	end := uint64(d.Size)/sector - uint64(layout.GPTReserve)/sector - 1
	table := &gpt.Table{
		LogicalSectorSize: int(d.LogicalBlocksize), PhysicalSectorSize: int(d.PhysicalBlocksize), ProtectiveMBR: true,
		Partitions: []*gpt.Partition{{
			Index: 1, Start: start, End: end, Size: (end - start + 1) * sector,
			Type: gpt.Type(layout.TypeVar), Name: layout.LabelState,
		}},
	}
	return disk, in.writeStatePartition(ctx, disk, d, table)
}

// handOver boots an installed Terrarium instead of running live: when a
// disk holds one (an EFI partition and slot A) and the installer entry was
// not chosen, it makes that disk's EFI partition the firmware's next boot
// and restarts the machine. The installed system's initramfs clears the
// mark it leaves; a mark still set means the firmware did not boot the
// disk, and the ISO runs live instead of trying again.
func (in *Init) handOver(ctx context.Context, medium string) error {
	if _, ok := in.cmdline[layout.CmdlineInstall]; ok {
		return nil
	}
	disks, err := scanPartitions("/sys/class/block")
	if err != nil {
		return err
	}
	var names []string
	for name, d := range disks {
		_, esp := d.parts[layout.LabelESP]
		_, slot := d.parts[layout.LabelSlotA]
		if esp && slot && name != medium {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	disk := disks[names[0]]
	if _, err := os.Stat(filepath.Dir(in.efivars)); errors.Is(err, os.ErrNotExist) {
		// Under BIOS the ISO's GRUB menu does the handover: its default
		// boots an installed disk it finds, so this live boot was chosen.
		in.say("Terrarium is installed on %s; this machine booted the ISO under BIOS, whose menu boots that disk by default: running live, as chosen (or, if the menu did not offer the disk, put the disk before the ISO in the BIOS's boot order)", disk.dev())
		return nil
	}
	mark := efiboot.Own{Dir: in.efivars, Name: efiboot.HandoverVar}
	if _, tried, _ := mark.Get(); tried {
		in.clearHandover(mark)
		in.say("the firmware did not boot the installed Terrarium on %s after the last handover: running live from the ISO instead (put that disk first in the firmware's boot order)", disk.dev())
		return nil
	}
	part, err := espPartition(disk)
	if err == nil {
		vars := efiboot.Vars{Dir: in.efivars}
		var n uint16
		if n, err = vars.Ensure(efiboot.LoadOption{Description: "Terrarium", Partition: part, Path: efiboot.LoaderPath}); err == nil {
			if err = mark.Set([]byte(disk.name)); err == nil {
				err = vars.Next(n)
			}
		}
		if err == nil {
			in.say("Terrarium is installed on %s: booting it (boot option Boot%04X); the ISO is not needed any more, remove it to boot the disk directly", disk.dev(), n)
			unix.Sync()
			err = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		}
	}
	in.clearHandover(mark)
	in.say("Terrarium is installed on %s, but the boot cannot be handed over to it (%v): running live from the ISO instead", disk.dev(), err)
	return nil
}

// clearHandover removes the handover mark, so that the next boot from the
// ISO tries the handover again; a mark left behind makes that boot run live.
func (in *Init) clearHandover(mark efiboot.Own) {
	if err := mark.Delete(); err != nil {
		in.say("clearing the handover mark: %v (continuing)", err)
	}
}

// espPartition reads the EFI partition's place and GUID from the disk's
// GPT, as a boot option names it.
func espPartition(disk *diskInfo) (efiboot.Partition, error) {
	d, err := diskfs.Open(disk.dev(), diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return efiboot.Partition{}, err
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		return efiboot.Partition{}, fmt.Errorf("read the GPT of %s: %w", disk.dev(), err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok {
		return efiboot.Partition{}, fmt.Errorf("%s has no GPT", disk.dev())
	}
	for _, p := range table.Partitions {
		if p.Name == layout.LabelESP {
			return efiboot.Partition{Number: uint32(p.Index), Start: p.Start, Size: p.End - p.Start + 1, GUID: p.GUID}, nil
		}
	}
	return efiboot.Partition{}, fmt.Errorf("%s has no %s partition", disk.dev(), layout.LabelESP)
}
