package slotinstall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/readahead"
)

// SlotDevices opens the slots' partitions.
type SlotDevices interface {
	// OpenSlot opens slot's partition for writing and reading back.
	OpenSlot(ctx context.Context, slot layout.Slot) (SlotDevice, error)
}

// SlotDevice is a slot's partition, open. An *os.File of a regular file
// is one, but for Size; see ByPartLabel for the device.
type SlotDevice interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes what was written durable, and drops what the kernel
	// caches of it, so that reading it again reads the disk.
	Sync() error
	// Size returns the partition's size in bytes.
	Size() (int64, error)
	// Name names the partition in messages (its device path).
	Name() string
}

// ByPartLabel returns the SlotDevices of the partitions named by GPT label
// in dir, normally /dev/disk/by-partlabel: dir/TERRA-A and dir/TERRA-B.
// It opens a partition with O_EXCL, which Linux refuses for a mounted
// block device, and refuses when both labels name one device.
func ByPartLabel(dir string) SlotDevices { return byPartLabel{dir: dir, poll: time.Second} }

type byPartLabel struct {
	dir string
	// open opens a partition (nil: os.OpenFile); poll paces the tries
	// of one in use.
	open func(p string, flag int) (*os.File, error)
	poll time.Duration
}

var _ SlotDevices = byPartLabel{}

// OpenSlot implements SlotDevices.
func (b byPartLabel) OpenSlot(ctx context.Context, slot layout.Slot) (SlotDevice, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := filepath.Join(b.dir, slot.Label())
	dev, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fmt.Errorf("slot %s's partition: %w (is there a partition labelled %s on the boot disk?)", slot, err, slot.Label())
	}
	if other, err := filepath.EvalSymlinks(filepath.Join(b.dir, slot.Other().Label())); err == nil && other == dev {
		return nil, fmt.Errorf("%s and %s are both %s: %w", slot.Label(), slot.Other().Label(), dev, ErrSameDevice)
	}
	// A slot the registry served (a trial boot's fallback, a Kubernetes
	// run in place) is let go a few seconds after its marker goes: an
	// open that finds it busy is tried again for a while.
	open := b.open
	if open == nil {
		open = func(p string, flag int) (*os.File, error) { return os.OpenFile(p, flag, 0) }
	}
	deadline := time.Now().Add(busyWait)
	for {
		f, err := open(p, os.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC)
		if err == nil {
			return partition{f}, nil
		}
		if !errors.Is(err, unix.EBUSY) || !time.Now().Before(deadline) {
			return nil, fmt.Errorf("open slot %s's partition (in use, or mounted?): %w", slot, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(b.poll):
		}
	}
}

// busyWait bounds OpenSlot's wait for a slot in use to be let go.
const busyWait = 30 * time.Second

// partition is a slot's partition, a block device or a file.
type partition struct{ *os.File }

var _ SlotDevice = partition{}

// Size implements SlotDevice: the offset of the end (a block device's
// Stat says 0).
func (p partition) Size() (int64, error) {
	n, err := p.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, &os.PathError{Op: "size", Path: p.Name(), Err: err}
	}
	return n, nil
}

// Sync implements SlotDevice.
func (p partition) Sync() error {
	if err := p.File.Sync(); err != nil {
		return err
	}
	if err := unix.Fadvise(int(p.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return &os.PathError{Op: "drop cache", Path: p.Name(), Err: err}
	}
	return nil
}

// deviceWriter writes a device from its start, through ops.check, and
// remembers its own error apart from the reader's.
type deviceWriter struct {
	dev SlotDevice
	off int64
	o   ops
	err error
}

func (w *deviceWriter) Write(p []byte) (int, error) {
	if err := w.o.check("write " + w.dev.Name()); err != nil {
		w.err = err
		return 0, err
	}
	n, err := w.dev.WriteAt(p, w.off)
	w.off += int64(n)
	if err != nil {
		w.err = fmt.Errorf("write %s at byte %d: %w", w.dev.Name(), w.off, err)
	}
	return n, w.err
}

// readBackSHA256 returns the hex SHA-256 of the device's first size bytes.
func readBackSHA256(ctx context.Context, dev SlotDevice, size int64) (string, error) {
	h := sha256.New()
	// The device is read ahead of the hash, which then seldom waits for it.
	n, err := readahead.Copy(ctx, h, io.NewSectionReader(dev, 0, size))
	if err != nil {
		return "", fmt.Errorf("read back %s: %w", dev.Name(), err)
	}
	if n != size {
		return "", fmt.Errorf("read back %s: %d of %d bytes: %w", dev.Name(), n, size, ErrReadBack)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
