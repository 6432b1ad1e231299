package build

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/release"
	"github.com/terrarium-os/terrarium/pkg/image/biosboot"
	"github.com/terrarium-os/terrarium/pkg/image/esp"
	"github.com/terrarium-os/terrarium/pkg/image/iso"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// isoMenuSeconds is the least time the ISO's boot menu shows.
const isoMenuSeconds = 5

// isoContents is the ISO's ESP: systemd-boot, the live entry (the
// default) and the installer entry, never counted: the medium is
// read-only, and there is no other slot to fall back to. No
// loader/random-seed either, so systemd-boot does not try to refresh one
// on the medium.
//
// With signed (a Secure Boot build) it holds systemd-boot signed, the
// enrollment files and the live entry alone, as one signed UKI: El
// Torito's image holds at most 32 MiB, one UKI is about 18 MiB, and under
// Secure Boot an entry's command line is its UKI's. A live node installs
// when its config's install section says so (docs/operations/usb-nuc.md).
func isoContents(s *spec.Spec, boot bootFiles, signed *signedBoot) esp.Contents {
	c := esp.Contents{
		SystemdBoot: boot.sdboot,
		// The menu shows long enough to choose the installer entry.
		TimeoutSeconds: max(s.Boot.TimeoutSeconds, isoMenuSeconds),
		Entries: []esp.Entry{{
			Slot: layout.SlotA, Title: fmt.Sprintf("Terrarium %s (live)", s.Version),
			Version: s.Version, Kernel: boot.kernel, Initrd: boot.initrd,
			Cmdline: liveCmdline(s),
			SortKey: "terrarium-1",
		}, {
			// Chosen from the menu: installs to the first empty disk,
			// enrolled when a config medium is attached, else waiting for
			// one.
			ID: "terrarium-install", Slot: layout.SlotA,
			Title:   fmt.Sprintf("Install Terrarium %s to the first empty disk", s.Version),
			Version: s.Version, Kernel: boot.kernel, Initrd: boot.initrd,
			Cmdline: append(liveCmdline(s), layout.CmdlineInstall+"=auto"),
			SortKey: "terrarium-2",
		}},
	}
	if signed != nil {
		c.SystemdBoot, c.EnrollKeys, c.SecureBootEnroll = signed.sdboot, signed.enrollKeys, s.SecureBoot.Enroll
		c.Entries = c.Entries[:1]
		c.Entries[0].UKI = signed.liveUKI
	}
	return c
}

// liveCmdline is the live entry's kernel command line (before the slot's
// argument).
func liveCmdline(s *spec.Spec) []string {
	return append(append([]string(nil), s.Kernel.Cmdline...), layout.CmdlineLive)
}

// isoBIOS is what boots the ISO under BIOS: GRUB's images and a menu of
// the ESP's entries, the live system first. A Secure Boot build's ISO
// boots under UEFI only: under BIOS nothing would check what it boots.
func isoBIOS(c esp.Contents, boot bootFiles, signed *signedBoot) *isoBIOSBoot {
	if signed != nil {
		return nil
	}
	menu := biosboot.LiveMenu{TimeoutSeconds: c.TimeoutSeconds}
	for _, e := range c.Entries {
		id := e.ID
		if id == "" {
			id = "terrarium-live"
		}
		menu.Entries = append(menu.Entries, biosboot.LiveEntry{ID: id, Title: e.Title, Cmdline: e.Slot.Cmdline(e.Cmdline)})
	}
	return &isoBIOSBoot{menu: menu, core: boot.grubCDCore, hybridMBR: boot.grubHybrid, kernel: boot.kernel, initrd: boot.initrd}
}

// isoBIOSBoot is the ISO's BIOS boot, as the build has it.
type isoBIOSBoot struct {
	menu                            biosboot.LiveMenu
	core, hybridMBR, kernel, initrd string
}

// isoInputs are what the iso stage reads.
type isoInputs struct {
	esp     esp.Contents
	bios    *isoBIOSBoot // nil: UEFI only
	release release.Release
	disk    rawDisk // the raw image: its head, up to slot A, goes on the ISO
	slot    string  // slot A's squashfs
	epoch   time.Time
}

// writeISO writes the hybrid ISO to dst: slot A's squashfs and the disk's
// head on an ISO 9660 filesystem, booted through its own small ESP. work
// holds its intermediate files.
func writeISO(ctx context.Context, work, dst string, in isoInputs) (string, error) {
	espImg := filepath.Join(work, "iso-esp.img")
	if err := esp.WriteSmall(ctx, espImg, in.esp, in.epoch); err != nil {
		return "", fmt.Errorf("the ISO's EFI partition: %w", err)
	}
	fi, err := os.Stat(espImg)
	if err != nil {
		return "", err
	}
	rel, err := in.release.Marshal()
	if err != nil {
		return "", err
	}
	var slotA int64
	for _, p := range in.disk.placed {
		if p.Label == layout.LabelSlotA {
			slotA = p.Start
		}
	}
	if slotA == 0 {
		return "", fmt.Errorf("the raw image has no %s partition", layout.LabelSlotA)
	}
	head := filepath.Join(work, "disk-head.img")
	if err := iso.Head(in.disk.path, slotA, head); err != nil {
		return "", err
	}
	inputs := iso.Inputs{ESP: espImg, Slot: in.slot, Head: head, Release: rel, Epoch: in.epoch}
	firmware := "UEFI"
	if b := in.bios; b != nil {
		cfg, err := b.menu.GrubCfg()
		if err != nil {
			return "", err
		}
		inputs.BIOS = &iso.BIOS{Core: b.core, HybridMBR: b.hybridMBR, Config: []byte(cfg), Kernel: b.kernel, Initrd: b.initrd}
		firmware = "UEFI and BIOS"
	}
	if err := iso.Write(ctx, dst, inputs); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, EFI partition %d MiB", firmware, fi.Size()/layout.MiB), nil
}
