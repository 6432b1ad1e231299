package snapshotter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
)

// partLabelWait bounds the wait for udev's link to the other slot.
const partLabelWait = time.Minute

// MountOtherSlot opens the slot this boot does not run (per the kernel
// command line in cmdline, /proc/cmdline): its partition, found by its
// label under byPartLabel, mounted read-only at mnt. A boot with no slot
// (live from the ISO) has no other slot.
func MountOtherSlot(cmdline, byPartLabel, mnt string) OtherSlot {
	return func(ctx context.Context) (string, func(), error) {
		b, err := os.ReadFile(cmdline)
		if err != nil {
			return "", nil, err
		}
		var running layout.Slot
		for _, f := range strings.Fields(string(b)) {
			if v, ok := strings.CutPrefix(f, layout.CmdlineSlot+"="); ok {
				running = layout.Slot(v)
			}
		}
		if !running.Valid() {
			return "", nil, fmt.Errorf("%s names no slot this boot runs", cmdline)
		}
		dev := filepath.Join(byPartLabel, running.Other().Label())
		// udev makes the link on its own schedule after boot.
		deadline := time.Now().Add(partLabelWait)
		for {
			if _, err := os.Stat(dev); err == nil {
				break
			} else if !time.Now().Before(deadline) {
				return "", nil, fmt.Errorf("the other slot's partition: %w", err)
			}
			select {
			case <-ctx.Done():
				return "", nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return "", nil, err
		}
		if err := unix.Mount(dev, mnt, "squashfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return "", nil, &os.PathError{Op: "mount the other slot", Path: dev, Err: err}
		}
		return filepath.Join(mnt, layout.SlotLayersDir), func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }, nil
	}
}
