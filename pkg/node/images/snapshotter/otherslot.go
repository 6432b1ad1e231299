package snapshotter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/boot/slotmount"
)

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
		unmount, err := slotmount.Mount(ctx, byPartLabel, running.Other(), mnt)
		if err != nil {
			return "", nil, err
		}
		return filepath.Join(mnt, layout.SlotLayersDir), unmount, nil
	}
}
