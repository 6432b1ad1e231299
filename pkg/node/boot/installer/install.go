package installer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/efiboot"
	"golang.org/x/sys/unix"
)

// Options of Install.
type Options struct {
	Target Disk
	Medium Medium
	// Wipe allows a target that holds data in its first MiB.
	Wipe bool
	// Dev is the target's device node; "" is Target.Dev() (tests pass a
	// file).
	Dev string
	// State, when set, makes and seeds TERRA-STATE on the target; nil
	// leaves that to the installed system's first boot.
	State *State
	// Boot, when set, gets a boot option for the target's EFI partition,
	// first in BootOrder and in BootNext.
	Boot *efiboot.Vars
	// Report says what the installer does, a line at a time.
	Report func(string)
}

// State makes the installed system's TERRA-STATE: the installer adds the
// partition; these do the rest on the machine.
type State struct {
	// PartitionDev waits for partition n (1-based) of the target to
	// appear and returns its device node.
	PartitionDev func(ctx context.Context, n int) (string, error)
	// Format makes TERRA-STATE on dev: an ext4 filesystem labelled
	// layout.LabelStateFS, on dev itself or in an encrypted volume it
	// opens. It returns the device that holds the filesystem and what
	// closes the volume (nil when it opened none).
	Format func(ctx context.Context, dev string) (fsdev string, closeVolume func() error, err error)
	// WithMounted mounts dev for fn.
	WithMounted func(ctx context.Context, dev string, fn func(dir string) error) error
	// Seed writes what the installed system starts from (the node's
	// enrollment) into the mounted STATE; nil leaves STATE empty (the
	// installed system waits for a config).
	Seed func(dir string) error
}

// Result is what Install did.
type Result struct {
	Target     Disk
	SlotSHA256 string // read back from the target
	ESP        efiboot.Partition
	BootOption int // the Boot#### number, or -1 when Boot was nil
}

// ErrNotEmpty means the target holds data and the config does not allow
// wiping it.
var ErrNotEmpty = errors.New("the install target holds data")

const sector = 512

// Install writes the medium onto the target. The medium's files are
// checked against their sha256 before anything is written, and the slot
// is read back from the target and checked after.
func Install(ctx context.Context, o Options) (Result, error) {
	res := Result{Target: o.Target, BootOption: -1}
	report := o.Report
	if report == nil {
		report = func(string) {}
	}
	dev := o.Dev
	if dev == "" {
		dev = o.Target.Dev()
	}
	head, err := readHeadTable(o.Medium.File(layout.ISOHeadFile))
	if err != nil {
		return res, err
	}
	slotA, headESP, slotB := findParts(head)
	if slotA == nil || headESP == nil {
		return res, fmt.Errorf("%s has no %s or %s partition: the medium is not a Terrarium installer ISO", layout.ISOHeadFile, layout.LabelESP, layout.LabelSlotA)
	}
	slotFile := o.Medium.File(layout.ISOSlotFile)
	slotInfo, err := os.Stat(slotFile)
	if err != nil {
		return res, err
	}
	if uint64(slotInfo.Size()) > slotA.Size {
		return res, fmt.Errorf("%s (%d bytes) does not fit its partition (%d bytes)", layout.ISOSlotFile, slotInfo.Size(), slotA.Size)
	}

	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return res, fmt.Errorf("open the install target: %w", err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return res, fmt.Errorf("size of %s: %w", dev, err)
	}
	var lastEnd uint64
	for _, p := range head.Partitions {
		lastEnd = max(lastEnd, p.End)
	}
	align := uint64(layout.Alignment / sector)
	stateStart := (lastEnd + 1 + align - 1) / align * align
	stateEnd := uint64(size)/sector - uint64(layout.GPTReserve)/sector - 1
	if stateEnd <= stateStart || (stateEnd-stateStart+1)*sector < uint64(layout.MinStateSize) {
		return res, fmt.Errorf("%s is %s: Terrarium needs at least %s (its slots and a TERRA-STATE of %s); select a bigger disk", o.Target, humanSize(size),
			humanSize(int64(stateStart*sector)+layout.MinStateSize+layout.GPTReserve), humanSize(layout.MinStateSize))
	}
	if !o.Wipe {
		if what, err := Holds(f); err != nil {
			return res, err
		} else if what != "" {
			return res, fmt.Errorf("%w: %s holds %s; set install.wipe: true in the machine config to overwrite it (everything on it is lost)", ErrNotEmpty, o.Target, what)
		}
	}
	// Every file of the medium is checked before a byte is written.
	sums, err := o.Medium.Verify(ctx, report)
	if err != nil {
		return res, err
	}

	report(fmt.Sprintf("installing onto %s", o.Target))
	if err := copyAt(ctx, f, o.Medium.File(layout.ISOHeadFile), 0, "the EFI partition", report); err != nil {
		return res, err
	}
	if err := copyAt(ctx, f, slotFile, int64(slotA.Start*sector), "slot A", report); err != nil {
		return res, err
	}
	if slotB != nil {
		// An empty slot B: nothing that looks like a squashfs.
		if _, err := f.WriteAt(make([]byte, min(layout.MiB, int64(slotB.Size))), int64(slotB.Start*sector)); err != nil {
			return res, fmt.Errorf("clear slot B on %s: %w", dev, err)
		}
	}
	table, err := freshTable(head, stateStart, stateEnd, o.State != nil)
	if err != nil {
		return res, err
	}
	if o.State != nil {
		// Only a marked partition without a filesystem is ever formatted
		// implicitly; the installer formats it itself below, but a power
		// cut before that leaves the mark, not an old filesystem.
		if _, err := f.WriteAt(layout.StateMarkBlock(), int64(stateStart*sector)); err != nil {
			return res, fmt.Errorf("mark TERRA-STATE on %s: %w", dev, err)
		}
	}
	if err := table.Write(f, size); err != nil {
		return res, fmt.Errorf("write the GPT of %s: %w", dev, err)
	}
	if err := f.Sync(); err != nil {
		return res, fmt.Errorf("sync %s: %w", dev, err)
	}

	// Read the slot back from the disk, not from the page cache.
	_ = unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0)
	report("verifying slot A on " + dev)
	got, err := hashReader(ctx, io.NewSectionReader(f, int64(slotA.Start*sector), slotInfo.Size()), slotInfo.Size())
	if err != nil {
		return res, fmt.Errorf("read slot A back from %s: %w", dev, err)
	}
	if want := sums[path.Base(layout.ISOSlotFile)]; got != want {
		return res, fmt.Errorf("slot A on %s reads back as sha256 %s, the medium's is %s: the disk is failing or was changed while installing", dev, got, want)
	}
	res.SlotSHA256 = got
	report(fmt.Sprintf("slot A verified on %s (sha256 %s)", dev, got))

	_, esp, _ := findParts(table)
	res.ESP = efiboot.Partition{Number: uint32(esp.Index), Start: esp.Start, Size: esp.End - esp.Start + 1, GUID: esp.GUID}
	// The kernel learns the new table (a file in tests has none to learn).
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err != nil && !errors.Is(err, unix.ENOTTY) {
		return res, fmt.Errorf("re-read the partition table of %s: %w", dev, err)
	}
	if o.State != nil {
		if err := makeState(ctx, o.State, len(table.Partitions)); err != nil {
			return res, err
		}
		report("TERRA-STATE made" + map[bool]string{true: " and seeded with this node's enrollment", false: ""}[o.State.Seed != nil])
	}
	if o.Boot != nil {
		n, err := o.Boot.Ensure(efiboot.LoadOption{Description: "Terrarium", Partition: res.ESP, Path: efiboot.LoaderPath})
		if err == nil {
			err = o.Boot.First(n)
		}
		if err == nil {
			err = o.Boot.Next(n)
		}
		if err != nil {
			return res, fmt.Errorf("make %s the first boot option: %w", dev, err)
		}
		res.BootOption = int(n)
		report(fmt.Sprintf("boot option Boot%04X boots %s first", n, dev))
	}
	return res, nil
}

// readHeadTable reads the GPT at the start of the head file.
func readHeadTable(p string) (*gpt.Table, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := gpt.Read(f, sector, sector)
	if err != nil {
		return nil, fmt.Errorf("the GPT of %s: %w", layout.ISOHeadFile, err)
	}
	return t, nil
}

func findParts(t *gpt.Table) (slotA, esp, slotB *gpt.Partition) {
	for _, p := range t.Partitions {
		switch p.Name {
		case layout.LabelSlotA:
			slotA = p
		case layout.LabelESP:
			esp = p
		case layout.LabelSlotB:
			slotB = p
		}
	}
	return slotA, esp, slotB
}

// freshTable is the head's partitions with new GUIDs (two disks installed
// from one ISO must not share them: firmware finds the ESP by its GUID),
// and TERRA-STATE after them when withState.
func freshTable(head *gpt.Table, stateStart, stateEnd uint64, withState bool) (*gpt.Table, error) {
	diskGUID, err := newGUID()
	if err != nil {
		return nil, err
	}
	t := &gpt.Table{LogicalSectorSize: sector, PhysicalSectorSize: sector, ProtectiveMBR: true, GUID: diskGUID}
	for _, p := range head.Partitions {
		g, err := newGUID()
		if err != nil {
			return nil, err
		}
		t.Partitions = append(t.Partitions, &gpt.Partition{
			Index: p.Index, Start: p.Start, End: p.End, Size: (p.End - p.Start + 1) * sector,
			Type: p.Type, Name: p.Name, GUID: g, Attributes: p.Attributes,
		})
	}
	if withState {
		g, err := newGUID()
		if err != nil {
			return nil, err
		}
		t.Partitions = append(t.Partitions, &gpt.Partition{
			Index: len(t.Partitions) + 1, Start: stateStart, End: stateEnd, Size: (stateEnd - stateStart + 1) * sector,
			Type: gpt.Type(layout.TypeVar), Name: layout.LabelState, GUID: g,
		})
	}
	return t, nil
}

func newGUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%X-%X-%X-%X-%X", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// Holds says what a disk's first MiB holds ("" when it is all zeros).
func Holds(f *os.File) (string, error) {
	b := make([]byte, layout.MiB)
	if _, err := f.ReadAt(b, 0); err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	switch {
	case string(b[512:520]) == "EFI PART":
		return "a GPT partition table", nil
	case b[510] == 0x55 && b[511] == 0xaa:
		return "an MBR partition table or a boot sector", nil
	}
	for _, c := range b {
		if c != 0 {
			return "data", nil
		}
	}
	return "", nil
}

// copyAt copies file into f at off, reporting every tenth.
func copyAt(ctx context.Context, f *os.File, file string, off int64, what string, report func(string)) error {
	src, err := os.Open(file)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	total := fi.Size()
	buf := make([]byte, 4<<20)
	var done int64
	nextTenth := int64(1)
	start := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := f.WriteAt(buf[:n], off+done); err != nil {
				return fmt.Errorf("write %s to %s: %w", what, f.Name(), err)
			}
			done += int64(n)
		}
		if total > 0 && done*10 >= nextTenth*total && nextTenth <= 10 {
			report(fmt.Sprintf("writing %s: %d%% (%d of %d MiB, %s)", what, done*100/total, done>>20, total>>20, time.Since(start).Round(time.Second)))
			nextTenth = done*10/total + 1
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read %s: %w", file, rerr)
		}
	}
}

// makeState formats the new TERRA-STATE (partition n) and seeds it.
func makeState(ctx context.Context, s *State, n int) (err error) {
	dev, err := s.PartitionDev(ctx, n)
	if err != nil {
		return fmt.Errorf("TERRA-STATE on the target: %w", err)
	}
	fsdev, closeVolume, err := s.Format(ctx, dev)
	if err != nil {
		return fmt.Errorf("format TERRA-STATE %s: %w", dev, err)
	}
	if closeVolume != nil {
		defer func() {
			if cerr := closeVolume(); err == nil && cerr != nil {
				err = fmt.Errorf("close TERRA-STATE %s: %w", dev, cerr)
			}
		}()
	}
	if s.Seed == nil {
		return nil
	}
	return s.WithMounted(ctx, fsdev, func(dir string) error {
		return s.Seed(dir)
	})
}

// MinDiskSize is the smallest disk the medium installs onto: its
// partitions, a TERRA-STATE of layout.MinStateSize and the backup GPT.
func (m Medium) MinDiskSize() (int64, error) {
	head, err := readHeadTable(m.File(layout.ISOHeadFile))
	if err != nil {
		return 0, err
	}
	var lastEnd uint64
	for _, p := range head.Partitions {
		lastEnd = max(lastEnd, p.End)
	}
	return int64(lastEnd+1)*sector + layout.Alignment + layout.MinStateSize + layout.GPTReserve, nil
}

// WaitPartition waits for partition n of disk to appear in sysBlock
// (/sys/class/block) and as a device node, and returns the node.
func WaitPartition(ctx context.Context, sysBlock, disk string, n int) (string, error) {
	for i := 0; i < 100; i++ {
		entries, err := os.ReadDir(sysBlock)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "partition"))
			if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(n) {
				continue
			}
			target, err := os.Readlink(filepath.Join(sysBlock, e.Name()))
			if err != nil || filepath.Base(filepath.Dir(target)) != disk {
				continue
			}
			if _, err := os.Stat("/dev/" + e.Name()); err == nil {
				return "/dev/" + e.Name(), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("partition %d of /dev/%s did not appear", n, disk)
}
