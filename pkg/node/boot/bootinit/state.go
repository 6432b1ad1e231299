package bootinit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	dfsdisk "github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/statecrypt"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodestate"
	"golang.org/x/sys/unix"
)

// errNoRoom: the boot disk has no room for TERRA-STATE.
var errNoRoom = errors.New("no room for TERRA-STATE")

// statePartition finds or makes the disk that holds TERRA-STATE, in this
// order: the boot disk's own; a new one filling the boot disk's free
// space; and, only when the boot disk has no room (a VM's OS disk the
// size of the image), a fixed disk holding a TERRA-STATE and no slot (the
// VM's state disk, which outlives a swap of the OS disk for a new
// version's), else the first empty disk, which takes a new one. A machine
// with room on its boot disk never adopts another disk's state. An
// existing TERRA-STATE is only ever grown (growStatePartition).
func (in *Init) statePartition(ctx context.Context, boot *diskInfo) (*diskInfo, error) {
	if dev, ok := boot.partDev(layout.LabelState); ok {
		in.say("TERRA-STATE found on %s", dev)
		in.growStatePartition(ctx, boot)
		return boot, nil
	}
	err := in.ensureStatePartition(ctx, boot)
	if !errors.Is(err, errNoRoom) {
		return boot, err
	}
	if d, serr := in.stateOnlyDisk(boot.name, "the boot disk is /dev/"+boot.name); serr != nil || d != nil {
		if d != nil {
			in.growStatePartition(ctx, d)
		}
		return d, serr
	}
	devs, derr := blockDevices("/sys/class/block")
	if derr != nil {
		return nil, derr
	}
	d, derr := in.takeEmptyDisk(ctx, devs, boot.name)
	if d != nil || derr != nil {
		return d, derr
	}
	return nil, fmt.Errorf("%w, or attach an empty disk of at least %d MiB, which then holds TERRA-STATE", err, layout.MinStateSize>>20)
}

// ensureStatePartition creates TERRA-STATE filling the rest of the boot
// disk when the disk has none. An existing partition is left as it is.
func (in *Init) ensureStatePartition(ctx context.Context, disk *diskInfo) error {
	if dev, ok := disk.partDev(layout.LabelState); ok {
		in.say("TERRA-STATE found on %s", dev)
		return nil
	}
	d, table, err := openGPT(disk)
	if err != nil {
		return err
	}
	defer d.Close()
	sector := uint64(table.LogicalSectorSize)
	var lastEnd uint64
	for _, p := range table.Partitions {
		lastEnd = max(lastEnd, p.End)
		if p.Name == layout.LabelState {
			// The table has it; the kernel has not shown it yet.
			in.say("TERRA-STATE is in %s's partition table; waiting for the kernel to show it", disk.dev())
			return in.waitForLabel(ctx, disk, layout.LabelState)
		}
	}
	align := uint64(layout.Alignment) / sector
	start := (lastEnd + 1 + align - 1) / align * align
	end := uint64(d.Size)/sector - uint64(layout.GPTReserve)/sector - 1
	if end <= start || (end-start+1)*sector < uint64(layout.MinStateSize) {
		return fmt.Errorf("%w: disk %s (%d MiB) leaves less than %d MiB for it: give the machine a bigger disk", errNoRoom, disk.dev(), d.Size>>20, layout.MinStateSize>>20)
	}
	// A fresh table, not the one read: go-diskfs keeps the old disk end
	// (backup header, last usable LBA) in a table it read, and the disk has
	// usually grown since the image was written (dd to a bigger stick, a
	// resized qcow2).
	table = &gpt.Table{
		Partitions: table.Partitions, LogicalSectorSize: table.LogicalSectorSize,
		PhysicalSectorSize: table.PhysicalSectorSize, ProtectiveMBR: true, GUID: table.GUID,
	}
	table.Partitions = append(table.Partitions, &gpt.Partition{
		Index: len(table.Partitions) + 1, Start: start, End: end, Size: (end - start + 1) * sector,
		Type: gpt.Type(layout.TypeVar), Name: layout.LabelState,
	})
	return in.writeStatePartition(ctx, disk, d, table)
}

// openGPT opens disk for writing and reads its GPT.
func openGPT(disk *diskInfo) (*dfsdisk.Disk, *gpt.Table, error) {
	d, err := diskfs.Open(disk.dev(), diskfs.WithOpenMode(diskfs.ReadWrite))
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", disk.dev(), err)
	}
	pt, err := d.GetPartitionTable()
	if err != nil {
		_ = d.Close()
		return nil, nil, fmt.Errorf("read GPT of %s: %w", disk.dev(), err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok {
		_ = d.Close()
		return nil, nil, fmt.Errorf("%s has no GPT", disk.dev())
	}
	return d, table, nil
}

// writeStatePartition writes table, whose last partition is a new
// TERRA-STATE, to disk, and waits for the kernel to show it.
func (in *Init) writeStatePartition(ctx context.Context, disk *diskInfo, d *dfsdisk.Disk, table *gpt.Table) error {
	p := table.Partitions[len(table.Partitions)-1]
	sector := uint64(table.LogicalSectorSize)
	// Mark the new area before the kernel sees it: only a partition that
	// carries this mark (and no filesystem) is ever formatted implicitly.
	f, err := os.OpenFile(disk.dev(), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(layout.StateMarkBlock(), int64(p.Start*sector))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mark new TERRA-STATE on %s: %w", disk.dev(), err)
	}
	if err := d.Partition(table); err != nil {
		return fmt.Errorf("write GPT of %s: %w", disk.dev(), err)
	}
	in.say("created TERRA-STATE: %d MiB at %d MiB on %s", (p.End-p.Start+1)*sector>>20, p.Start*sector>>20, disk.dev())
	return in.waitForLabel(ctx, disk, layout.LabelState)
}

func (in *Init) waitForLabel(ctx context.Context, disk *diskInfo, label string) error {
	for i := 0; i < 100; i++ {
		disks, err := scanPartitions("/sys/class/block")
		if err == nil && disks[disk.name] != nil {
			if p, ok := disks[disk.name].parts[label]; ok {
				if _, err := os.Stat("/dev/" + p); err == nil {
					disk.parts[label] = p
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("partition %s did not appear on %s", label, disk.dev())
}

func (in *Init) mountSlot(disk *diskInfo) error {
	label := in.slot().Label()
	dev, _ := disk.partDev(label)
	if err := os.MkdirAll(in.sysroot, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, in.sysroot, "squashfs", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s (%s) as squashfs: %w (is the slot empty or damaged?)", dev, label, err)
	}
	return nil
}

// stateKind tells what a TERRA-STATE partition holds: "ext4", "luks"
// (encrypted), "new" (created by Terrarium, never formatted) or
// "unknown".
func stateKind(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, 2048)
	if _, err := f.ReadAt(b, 0); err != nil {
		return "", fmt.Errorf("read %s: %w", dev, err)
	}
	switch {
	case b[1080] == 0x53 && b[1081] == 0xEF:
		return "ext4", nil
	case bytes.HasPrefix(b, []byte(statecrypt.Magic)):
		return "luks", nil
	case bytes.HasPrefix(b, []byte(layout.StateUnformattedMagic)):
		return "new", nil
	}
	return "unknown", nil
}

// ensureStateFS formats TERRA-STATE when (and only when) it is the fresh
// partition created by Terrarium, or the operator asked for a reset — as
// an encrypted volume on a machine with a TPM (makeState) — opens it when
// it is encrypted, then mounts it.
func (in *Init) ensureStateFS(ctx context.Context, disk *diskInfo) error {
	dev, _ := disk.partDev(layout.LabelState)
	kind, err := stateKind(dev)
	if err != nil {
		return err
	}
	_, reset := in.cmdline[layout.CmdlineResetState]
	fsdev, encryption := dev, ""
	switch {
	case kind == "ext4" && !reset:
		encryption = layout.StateEncryptionNone + " it was made without encryption (on a machine without a TPM 2.0, or by an earlier release)"
	case kind == "luks" && !reset:
		encryption = layout.StateEncryptionTPM
		fsdev, err = in.openState(ctx, dev)
		if errors.Is(err, statecrypt.ErrUnfinished) {
			reset = true // made again below: it never held anything
			fsdev, encryption, err = in.makeState(ctx, dev, "its creation was interrupted")
		}
		if err != nil {
			return err
		}
		kind = "luks"
	case kind == "new" || reset:
		fsdev, encryption, err = in.makeState(ctx, dev, map[bool]string{true: "reset requested", false: "new partition"}[reset])
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("TERRA-STATE %s holds neither an ext4 filesystem nor an encrypted volume, and was not created by Terrarium; refusing to format it. Boot once with %s on the kernel command line to format it (this erases it)", dev, layout.CmdlineResetState)
	}
	mnt := filepath.Join(in.sysroot, layout.StateMount)
	if err := unix.Mount(fsdev, mnt, "ext4", unix.MS_NOATIME|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fsdev, mnt, err)
	}
	if (kind == "ext4" || kind == "luks") && !reset {
		if at, ok := nodestate.At(mnt).ResetRequested(); ok {
			// `firstboot reset` asked for it (and was confirmed): made
			// again, an encrypted one under a new key, so that what the
			// old one held cannot be read again.
			if err := unix.Unmount(mnt, 0); err != nil {
				return fmt.Errorf("unmount %s for the requested reset: %w", mnt, err)
			}
			if fsdev != dev {
				if err := in.closeState(ctx); err != nil {
					return err
				}
			}
			if fsdev, encryption, err = in.makeState(ctx, dev, "`firstboot reset` "+at); err != nil {
				return err
			}
			if err := unix.Mount(fsdev, mnt, "ext4", unix.MS_NOATIME|unix.MS_NODEV, ""); err != nil {
				return fmt.Errorf("mount %s on %s: %w", fsdev, mnt, err)
			}
			reset = true
		}
	}
	if err := in.writeStateEncryption(encryption); err != nil {
		return fmt.Errorf("write %s: %w", in.stateEncryptionFile, err)
	}
	if !reset && (kind == "ext4" || kind == "luks") {
		in.growStateFS(fsdev, mnt)
	}
	return in.layoutState(ctx, mnt, kind == "new" || kind == "unknown" || reset)
}

// layoutState makes STATE's directories and seeds /var from the image the
// first time.
func (in *Init) layoutState(ctx context.Context, mnt string, fresh bool) error {
	for _, d := range []string{layout.StateEtcUpper, layout.StateEtcWork} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			return err
		}
	}
	// firstboot's files are nodestate's; the initramfs writes one of
	// them, the marker of a STATE it has just made.
	st := nodestate.At(mnt)
	if err := st.MakeDir(); err != nil {
		return err
	}
	if fresh {
		if err := st.CreateMarker(nodestate.Marker{Created: time.Now(), Slot: string(in.slot())}); err != nil {
			return err
		}
	}
	varDir := filepath.Join(mnt, layout.StateVarDir)
	if _, err := os.Stat(varDir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	in.say("seeding /var on TERRA-STATE from the image")
	tmp := varDir + ".seeding"
	// A leftover of an interrupted seeding must go: cp -a into an existing
	// directory would nest the copy as tmp/var.
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove the interrupted copy of /var %s: %w", tmp, err)
	}
	cmd := exec.CommandContext(ctx, "/bin/busybox", "cp", "-a", filepath.Join(in.sysroot, "var"), tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("copy /var to STATE: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return os.Rename(tmp, varDir)
}

func (in *Init) mountOverlays(context.Context) error {
	state := filepath.Join(in.sysroot, layout.StateMount)
	etc := filepath.Join(in.sysroot, "etc")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", etc,
		filepath.Join(state, layout.StateEtcUpper), filepath.Join(state, layout.StateEtcWork))
	if err := unix.Mount("overlay", etc, "overlay", 0, opts); err != nil {
		return &os.PathError{Op: "mount overlay", Path: etc, Err: err}
	}
	v := filepath.Join(in.sysroot, "var")
	if err := unix.Mount(filepath.Join(state, layout.StateVarDir), v, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind mount", Path: v, Err: err}
	}
	return nil
}

// chrootRun runs a tool of the slot's root filesystem (mkfs.ext4), with
// /dev, /proc and /sys bound in for the duration.
func (in *Init) chrootRun(ctx context.Context, name string, args ...string) error {
	_, err := in.chrootOutput(ctx, nil, name, args...)
	return err
}

// chrootOutput runs a tool of the slot's root filesystem with stdin as its
// input (cryptsetup reads keys from it) and returns its output. udev runs
// only after the switch of root: device-mapper makes its own nodes.
func (in *Init) chrootOutput(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	var bound []string
	defer func() {
		for i := len(bound) - 1; i >= 0; i-- {
			_ = unix.Unmount(bound[i], unix.MNT_DETACH) // lazy: fails only for a path not mounted
		}
	}()
	// /run too: cryptsetup reads a key from a file there (statecrypt's
	// AddKey).
	for _, m := range []string{"/dev", "/proc", "/sys", "/run"} {
		dst := filepath.Join(in.sysroot, m)
		if err := unix.Mount(m, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return nil, &os.PathError{Op: "bind mount", Path: dst, Err: err}
		}
		bound = append(bound, dst)
	}
	cmd := exec.CommandContext(ctx, "/bin/busybox", append([]string{"chroot", in.sysroot, name}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DM_DISABLE_UDEV=1"}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()+" "+stdout.String()))
	}
	return stdout.Bytes(), nil
}
