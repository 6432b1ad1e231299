package build

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/esp"
	"github.com/terrarium-os/terrarium/pkg/image/iso"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// isoMenuSeconds is the least time the ISO's boot menu shows.
const isoMenuSeconds = 5

// buildISO writes the hybrid ISO: slot A's squashfs on an ISO 9660
// filesystem, booted through its own small ESP whose one entry boots live
// from the medium.
func (r *run) buildISO(ctx context.Context) (string, error) {
	if !r.spec.WantsOutput(spec.OutputISO) {
		return "(not requested)", nil
	}
	kernel := filepath.Join(r.base.Dir, rootfs.BaseKernel)
	c := esp.Contents{
		SystemdBoot: filepath.Join(r.base.Dir, rootfs.BaseSDBoot),
		// The menu shows long enough to choose the installer entry.
		TimeoutSeconds: max(r.spec.Boot.TimeoutSeconds, isoMenuSeconds),
		// Entries never counted: the medium is read-only, and there is no
		// other slot to fall back to. No loader/random-seed either, so
		// systemd-boot does not try to refresh one on the medium.
		Entries: []esp.Entry{{
			Slot: layout.SlotA, Title: fmt.Sprintf("Terrarium %s (live)", r.spec.Version),
			Version: r.spec.Version, Kernel: kernel, Initrd: r.initrd,
			Cmdline: append(append([]string(nil), r.spec.Kernel.Cmdline...), layout.CmdlineLive),
			SortKey: "terrarium-1",
		}, {
			// Chosen from the menu (the ISO boots the live entry by
			// default): installs to the first empty disk, enrolled when a
			// config medium is attached, else waiting for one.
			ID: "terrarium-install", Slot: layout.SlotA,
			Title:   fmt.Sprintf("Install Terrarium %s to the first empty disk", r.spec.Version),
			Version: r.spec.Version, Kernel: kernel, Initrd: r.initrd,
			Cmdline: append(append([]string(nil), r.spec.Kernel.Cmdline...), layout.CmdlineLive, layout.CmdlineInstall+"=auto"),
			SortKey: "terrarium-2",
		}},
	}
	espImg := filepath.Join(r.work, "iso-esp.img")
	if err := esp.WriteSmall(ctx, espImg, c, r.spec.Epoch()); err != nil {
		return "", fmt.Errorf("the ISO's EFI partition: %w", err)
	}
	fi, err := os.Stat(espImg)
	if err != nil {
		return "", err
	}
	relInfo := r.release(r.spec.Faults)
	rel, err := relInfo.Marshal()
	if err != nil {
		return "", err
	}
	var slotA int64
	for _, p := range r.placed {
		if p.Label == layout.LabelSlotA {
			slotA = p.Start
		}
	}
	if slotA == 0 {
		return "", fmt.Errorf("the raw image has no %s partition", layout.LabelSlotA)
	}
	head := filepath.Join(r.work, "disk-head.img")
	if err := iso.Head(r.outPath(spec.OutputRaw), slotA, head); err != nil {
		return "", err
	}
	err = iso.Write(ctx, r.outPath(spec.OutputISO), iso.Inputs{
		ESP: espImg, Slot: r.slots[layout.SlotA], Head: head, Release: rel, Epoch: r.spec.Epoch(),
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("EFI partition %d MiB", fi.Size()/layout.MiB), nil
}
