// Package diskimage assembles Terrarium's disk: a GPT with a protective
// MBR, 1 MiB aligned partitions found by label, deterministic GUIDs, and
// each partition's content copied in with large buffers. The image is
// written to a temporary file and renamed into place only when complete.
package diskimage

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/terrarium-os/terrarium/pkg/contract/atomicfile"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// Partition is one partition to lay out.
type Partition struct {
	Label string
	Type  string // GPT type GUID
	Size  int64  // bytes, rounded up to the alignment
	// Source is an image file copied to the partition's start; empty
	// leaves the partition unwritten (zero, sparse).
	Source string
}

// Placed is a partition with its position on the disk.
type Placed struct {
	Partition
	Start int64
	GUID  string
}

// Plan places parts from 1 MiB on and returns them with the disk size.
func Plan(imageID string, parts []Partition) ([]Placed, int64) {
	off := layout.FirstPartitionOffset
	placed := make([]Placed, 0, len(parts))
	for _, p := range parts {
		p.Size = layout.AlignUp(p.Size)
		placed = append(placed, Placed{Partition: p, Start: off, GUID: layout.StableGUID(imageID, "part:"+p.Label)})
		off += p.Size
	}
	return placed, off + layout.GPTReserve
}

// WriteRaw writes the disk image to path.
func WriteRaw(ctx context.Context, path, imageID string, parts []Partition) ([]Placed, error) {
	return WriteRawThen(ctx, path, imageID, parts, nil)
}

// WriteRawThen writes the disk image to path as WriteRaw does, and has
// finish (when not nil) write more into it before it takes path's name:
// what lies outside the partitions' sources (a boot loader in the MBR).
func WriteRawThen(ctx context.Context, path, imageID string, parts []Partition, finish func(path string, placed []Placed) error) ([]Placed, error) {
	placed, size := Plan(imageID, parts)
	tmp := path + ".partial"
	_ = os.Remove(tmp) // a leftover of an interrupted run; diskfs.Create fails if it stays
	err := writeRaw(ctx, tmp, imageID, placed, size)
	if err == nil && finish != nil {
		err = finish(tmp, placed)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := atomicfile.Replace(tmp, path); err != nil {
		return nil, fmt.Errorf("write image %s: %w", path, err)
	}
	return placed, nil
}

func writeRaw(ctx context.Context, path, imageID string, placed []Placed, size int64) error {
	d, err := diskfs.Create(path, size, diskfs.SectorSize512)
	if err != nil {
		return fmt.Errorf("create image %s: %w", path, err)
	}
	table := &gpt.Table{
		LogicalSectorSize:  layout.SectorSize,
		PhysicalSectorSize: layout.SectorSize,
		ProtectiveMBR:      true,
		GUID:               layout.StableGUID(imageID, "disk"),
	}
	for i, p := range placed {
		start := uint64(p.Start / layout.SectorSize)
		end := uint64((p.Start+p.Size)/layout.SectorSize) - 1
		table.Partitions = append(table.Partitions, &gpt.Partition{
			Index: i + 1, Start: start, End: end, Size: uint64(p.Size),
			Type: gpt.Type(p.Type), Name: p.Label, GUID: p.GUID,
		})
	}
	if err := d.Partition(table); err != nil {
		_ = d.Close()
		return fmt.Errorf("write GPT to %s: %w", path, err)
	}
	if err := d.Close(); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range placed {
		if p.Source == "" {
			continue
		}
		if err := copyInto(ctx, f, p); err != nil {
			return fmt.Errorf("write partition %s of %s: %w", p.Label, path, err)
		}
	}
	return f.Sync()
}

func copyInto(ctx context.Context, f *os.File, p Placed) error {
	src, err := os.Open(p.Source)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > p.Size {
		return fmt.Errorf("%s is %d bytes, larger than the %d MiB partition (raise the size in the build spec)", p.Source, fi.Size(), p.Size>>20)
	}
	buf := make([]byte, 4<<20)
	off := p.Start
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// ConvertQCOW2 writes a qcow2 copy of a raw image with qemu-img.
func ConvertQCOW2(ctx context.Context, raw, out string) error {
	tmp := out + ".partial"
	_ = os.Remove(tmp) // a leftover of an interrupted run; qemu-img overwrites one that stays
	cmd := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, tmp)
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("qemu-img convert %s to qcow2: %w: %s", filepath.Base(raw), err, b)
	}
	return atomicfile.Replace(tmp, out)
}
