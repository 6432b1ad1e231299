// Package slotmount opens a slot the node does not run: its squashfs,
// found by its partition label, mounted read-only. The snapshotter reads
// the old slot's layers from it after an upgrade, and the registry serves
// the old slot's bundle from it during an upgrade's trial boot.
//
// A mounted slot cannot be written: the installer opens the partition
// exclusively (O_EXCL), which Linux refuses while it is mounted. So each
// user mounts it only for as long as it needs it.
package slotmount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// linkWait bounds the wait for udev's link to the slot's partition.
const linkWait = time.Minute

// Mount mounts slot's partition (its link under byPartLabel,
// /dev/disk/by-partlabel) read-only at mnt, waiting for udev to make the
// link. unmount detaches it; files still open keep reading until closed.
func Mount(ctx context.Context, byPartLabel string, slot layout.Slot, mnt string) (unmount func(), err error) {
	return mount(ctx, byPartLabel, slot, mnt, unix.MS_NOEXEC)
}

// MountExecutable is Mount with the slot's programs runnable: for a node
// that runs a staged slot's Kubernetes in place (package inplace).
func MountExecutable(ctx context.Context, byPartLabel string, slot layout.Slot, mnt string) (unmount func(), err error) {
	return mount(ctx, byPartLabel, slot, mnt, 0)
}

func mount(ctx context.Context, byPartLabel string, slot layout.Slot, mnt string, flags uintptr) (unmount func(), err error) {
	if !slot.Valid() {
		return nil, fmt.Errorf("mount slot %q: no such slot", slot)
	}
	dev := filepath.Join(byPartLabel, slot.Label())
	// udev makes the link on its own schedule after boot.
	deadline := time.Now().Add(linkWait)
	for {
		if _, err := os.Stat(dev); err == nil {
			break
		} else if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("slot %s's partition: %w", slot, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, err
	}
	if err := unix.Mount(dev, mnt, "squashfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|flags, ""); err != nil {
		return nil, &os.PathError{Op: "mount slot " + string(slot), Path: dev, Err: err}
	}
	return func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }, nil
}
