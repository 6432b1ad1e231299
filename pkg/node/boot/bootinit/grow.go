package bootinit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	dfsdisk "github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// stateGrowMin is the least growth worth taking: a disk enlarged by less
// is left as it is, and a partition is never rewritten for a few sectors.
const stateGrowMin = 64 * layout.MiB

// grownState returns a copy of table with TERRA-STATE extended to the end
// of a disk of size bytes, and its size before and after. ok is false when
// TERRA-STATE is not the table's last partition (nothing may move) or the
// disk offers less than stateGrowMin more.
func grownState(table *gpt.Table, size int64) (grown *gpt.Table, from, to uint64, ok bool) {
	sector := uint64(table.LogicalSectorSize)
	if sector == 0 {
		return nil, 0, 0, false
	}
	var state *gpt.Partition
	var lastEnd uint64
	for _, p := range table.Partitions {
		if p.Name == layout.LabelState {
			state = p
		}
		lastEnd = max(lastEnd, p.End)
	}
	if state == nil || state.End != lastEnd {
		return nil, 0, 0, false
	}
	end := uint64(size)/sector - uint64(layout.GPTReserve)/sector - 1
	if end <= state.End || (end-state.End)*sector < uint64(stateGrowMin) {
		return nil, 0, 0, false
	}
	// A fresh table, as when TERRA-STATE was created: go-diskfs keeps the
	// old disk end (backup header, last usable LBA) in a table it read.
	grown = &gpt.Table{
		LogicalSectorSize: table.LogicalSectorSize, PhysicalSectorSize: table.PhysicalSectorSize,
		ProtectiveMBR: true, GUID: table.GUID,
	}
	for _, p := range table.Partitions {
		c := *p
		if p == state {
			c.End = end
			c.Size = (end - c.Start + 1) * sector
		}
		grown.Partitions = append(grown.Partitions, &c)
	}
	return grown, state.Size, (end - state.Start + 1) * sector, true
}

// growStatePartition extends the boot disk's TERRA-STATE over space the
// disk gained after it (a VM disk enlarged, an image written to a bigger
// disk than the one it was first booted from). go-diskfs writes the backup
// table before the primary, each synced, so a power cut leaves one whole
// table. A failure is reported and the boot goes on: STATE keeps its size.
func (in *Init) growStatePartition(ctx context.Context, disk *diskInfo) {
	if err := in.tryGrowStatePartition(ctx, disk); err != nil {
		in.say("TERRA-STATE keeps its size: growing it failed: %v", err)
	}
}

func (in *Init) tryGrowStatePartition(ctx context.Context, disk *diskInfo) error {
	d, table, err := openGPT(disk)
	if err != nil {
		return err
	}
	defer d.Close()
	grown, from, to, ok := grownState(table, d.Size)
	if !ok {
		return nil
	}
	part := disk.parts[layout.LabelState]
	if err := d.Partition(grown); errors.Is(err, dfsdisk.ErrReReadDeferred) {
		in.say("TERRA-STATE /dev/%s grows from %d MiB to %d MiB at the next boot: the disk is busy", part, from>>20, to>>20)
		return nil
	} else if err != nil {
		return fmt.Errorf("write GPT of %s: %w", disk.dev(), err)
	}
	if err := waitForSize(ctx, part, to); err != nil {
		return err
	}
	in.say("grew TERRA-STATE /dev/%s from %d MiB to %d MiB: the disk has grown", part, from>>20, to>>20)
	return nil
}

// waitForSize waits until the kernel shows partition part with size bytes.
func waitForSize(ctx context.Context, part string, size uint64) error {
	var got uint64
	for range 100 {
		got, _ = sysfsSize(part)
		if got == size {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("the kernel still shows /dev/%s with %d MiB, not %d MiB; it takes the new size at the next boot", part, got>>20, size>>20)
}

// sysfsSize is a block device's size as the kernel sees it.
func sysfsSize(name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/sys/class/block", name, "size"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n * 512, err
}

// ext4Size reads an ext4 superblock: the filesystem's block size and its
// size in blocks.
func ext4Size(r io.ReaderAt) (blockSize, blocks uint64, err error) {
	sb := make([]byte, 1024)
	if _, err := r.ReadAt(sb, 1024); err != nil {
		return 0, 0, fmt.Errorf("read the ext4 superblock: %w", err)
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return 0, 0, errors.New("no ext4 superblock")
	}
	logSize := binary.LittleEndian.Uint32(sb[0x18:])
	if logSize > 6 { // 64 KiB, ext4's largest block
		return 0, 0, fmt.Errorf("ext4 superblock: block size 2^%d KiB", logSize)
	}
	blockSize = 1024 << logSize
	blocks = uint64(binary.LittleEndian.Uint32(sb[0x4:]))
	const incompat64bit = 0x80
	if binary.LittleEndian.Uint32(sb[0x60:])&incompat64bit != 0 {
		blocks |= uint64(binary.LittleEndian.Uint32(sb[0x150:])) << 32
	}
	return blockSize, blocks, nil
}

// ext4ResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a
// mounted ext4 to a number of blocks (linux/fs/ext4/ext4.h).
const ext4ResizeFS = 0x40086610

// growStateFS grows STATE's mounted ext4 (dev on mnt) to its partition's
// size, online, as resize2fs does for a mounted filesystem: the kernel has
// replayed the journal, which an offline resize after a power cut could
// not trust. A failure is reported and the boot goes on.
func (in *Init) growStateFS(dev, mnt string) {
	if err := in.tryGrowStateFS(dev, mnt); err != nil {
		in.say("TERRA-STATE's filesystem keeps its size: growing it failed: %v", err)
	}
}

func (in *Init) tryGrowStateFS(dev, mnt string) error {
	name, err := blockName(dev)
	if err != nil {
		return err
	}
	part, err := sysfsSize(name)
	if err != nil {
		return err
	}
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	blockSize, blocks, err := ext4Size(f)
	_ = f.Close() // read only
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	want := part / blockSize
	if (want-min(want, blocks))*blockSize < uint64(stateGrowMin) {
		return nil
	}
	dir, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer dir.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, dir.Fd(), ext4ResizeFS, uintptr(unsafe.Pointer(&want))); errno != 0 {
		return fmt.Errorf("resize %s to %d blocks: %w", dev, want, errno)
	}
	in.say("grew TERRA-STATE's filesystem from %d MiB to %d MiB", blocks*blockSize>>20, want*blockSize>>20)
	return nil
}

// blockName is the kernel's name of the block device dev ("vda3",
// "dm-0"), found by its device number: /dev/mapper's nodes are not named
// so.
func blockName(dev string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: dev, Err: err}
	}
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	if err != nil {
		return "", err
	}
	return filepath.Base(link), nil
}
