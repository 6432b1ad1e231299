package slotinstall

import "errors"

// Refusals and failures of Install. Install wraps them with the slot,
// device or file concerned; test for them with errors.Is. An upgrade the
// target slot already holds is reported with upgrade.ErrAlreadyInstalled,
// as upgrade.Check reports the one the node runs.
var (
	// ErrRunningOnTrial means the running slot's entry still carries a
	// boot counter: this boot has not passed its health check, and a slot
	// installed now could leave no good slot to fall back to.
	ErrRunningOnTrial = errors.New("the running slot is on trial (its boot is not blessed yet); " +
		"install the upgrade once this boot has passed its health check (firstboot status)")
	// ErrNoRunningEntry means the ESP has no entry for the running slot,
	// or more than one, so no fallback to it can be guaranteed.
	ErrNoRunningEntry = errors.New("the ESP has no single boot entry for the running slot, " +
		"so nothing would boot if the new slot failed; restore the entry " +
		"(loader/entries/terrarium-<slot>.conf, as the image has it) before upgrading")
	// ErrNeedsSignedUKI means the running slot boots a signed unified
	// kernel image (a Secure Boot image) and the upgrade carries a bare
	// kernel and initramfs, which the firmware would refuse to run.
	ErrNeedsSignedUKI = errors.New("this node boots signed unified kernel images under Secure Boot, " +
		"and the upgrade carries a bare kernel and initramfs, which its firmware would refuse to run; " +
		"install an upgrade built from a spec with secureBoot and the site's keys")
	// ErrUntrustedUKI means the upgrade's unified kernel image for the
	// target slot is not signed by a certificate the firmware's db holds:
	// the firmware would refuse to run it.
	ErrUntrustedUKI = errors.New("the upgrade's unified kernel image is not signed by a key this machine's firmware trusts (its db), " +
		"so the firmware would refuse to boot it; build the upgrade with the site's Secure Boot keys (secureBoot.keys), " +
		"or enroll the key that signed it")
	// ErrBootOrder means the new entry could not be made the one booted
	// next: loader.conf's default does not select both slots' entries, or
	// the running entry's sort-key leaves no key before it.
	ErrBootOrder = errors.New("the boot loader configuration cannot try the new slot first and fall back to the running one; " +
		"restore loader/loader.conf and the entries as the image writes them (default terrarium-*)")
	// ErrSlotTooSmall means the upgrade's rootfs is larger than the target
	// slot's partition.
	ErrSlotTooSmall = errors.New("the upgrade's rootfs does not fit the slot partition; " +
		"build the upgrade with a smaller rootfs, or reinstall the node from an image with a larger disk.slotSizeMiB")
	// ErrESPFull means the EFI system partition has no room for the new
	// kernel and initramfs.
	ErrESPFull = errors.New("the EFI system partition has no room for the new kernel and initramfs; " +
		"remove files that are not Terrarium's from it, or reinstall from an image with a larger disk.espSizeMiB")
	// ErrReadBack means bytes read back from a partition or the ESP after
	// writing and syncing them differ from the upgrade's: the disk lost or
	// changed them. The slot was not made bootable.
	ErrReadBack = errors.New("the disk returned other bytes than were written (a failing disk or controller?); " +
		"the new slot was not made bootable; check the disk (dmesg, smartctl) and install the upgrade again")
	// ErrCopiesDiffer means a slot written from a stream (Stream) and
	// the stream's other copy, each read back from its disk, differ: one
	// of the two disks lost or changed bytes. The slot was not made
	// bootable.
	ErrCopiesDiffer = errors.New("the slot and the other copy of its bytes, each read back from its disk, differ: one of the two disks returned other bytes than were written (a failing disk or controller? dmesg, smartctl); " +
		"the new slot was not made bootable")
	// ErrFailedBefore means the target slot holds this very upgrade and
	// its entry ran out of tries: it failed its health check at every
	// boot. Only Force installs it again.
	ErrFailedBefore = errors.New("this upgrade was installed in the target slot before and failed every boot it was given; " +
		"it is not installed again automatically: find out why it failed, or force it by hand")
	// ErrSameDevice means both slots' labels name one device.
	ErrSameDevice = errors.New("both slot labels name the same device; " +
		"check the partition labels of the boot disk (lsblk -o NAME,PARTLABEL)")
)

// ErrNotStaged means Arm found no staged entry of the upgrade Stage wrote:
// an install since replaced it, or it was never staged. Nothing was
// written.
var ErrNotStaged = errors.New("the ESP holds no staged entry of this upgrade (an install since replaced it?); " +
	"stage the upgrade again")
