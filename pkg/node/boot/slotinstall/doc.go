// Package slotinstall installs a verified upgrade file into the slot this
// boot does not run from: the slot's squashfs into its partition (TERRA-A
// or TERRA-B), its kernel and initramfs onto the EFI system partition, and
// a Boot Loader Spec entry with a boot counter that systemd-boot tries at
// the next boot. It records nothing in the node's state: Install returns a
// Result for firstboot to record.
//
// # Order, and what a power cut leaves
//
// Install checks everything before it writes a byte (Begin all but the
// rootfs's bytes, which its Stream's other writer checks as they pass,
// the slot unbootable until then), and writes in an
// order in which a power cut after any write leaves the running slot
// booting and the install retryable (Install run again completes it):
//
//  1. Check: the upgrade policy (upgrade.Check); the running slot's entry
//     exists and is blessed (not on trial); loader.conf's default pattern
//     selects either slot's entry; the target is the other slot; the
//     rootfs fits its partition and the kernel and initramfs fit on the
//     ESP. An upgrade the target slot already holds, complete and not
//     failed, is a no-op (an error wrapping upgrade.ErrAlreadyInstalled).
//  2. Unbootable: every entry of the target slot is removed, with the
//     temporary files of an interrupted install, and the entries
//     directory is synced. From here until step 5 the target slot has no
//     entry, so systemd-boot cannot pick it whatever its partition and
//     files hold. Cut before: the ESP is as it was. Then, on an image that
//     also boots under BIOS, GRUB's environment block is told that the
//     target is the slot installed last (bootloader.PreferGrub): GRUB
//     tries it first once it has an entry, as systemd-boot does by its
//     sort key, and boots the running slot until then.
//  3. Rootfs: the squashfs is copied into the target's partition, synced,
//     and read back from the disk and hashed against the signed manifest,
//     which catches both a file that changed after it was verified and a
//     disk that loses writes (the file's part is then hashed again to say
//     which). Cut during: a partial slot that nothing boots. Begin's
//     Stream writes the squashfs from the reads of another writer that
//     hashes them against the signed manifest (a control plane's upgrade
//     share, filling from a stick) instead: the slot, synced and read
//     back, must then equal that writer's copy read back from its own
//     disk, byte for byte (Stream.Finish); the stick is read and hashed
//     once for both.
//  4. Kernel and initramfs, each in terrarium/<slot>/ on the ESP: the old
//     NAME (and a NAME.new left over) is removed; NAME.new is written,
//     synced and read back; then it is renamed to NAME and the directory
//     synced. FAT renames are not atomic over an existing file, so nothing
//     is ever renamed over one; the old NAME goes first because the slot
//     has no entry that refers to it, and the ESP may have room for one
//     copy only. Cut during: the old NAME, no NAME, a partial NAME.new or
//     a complete NAME: the target still has no entry, and the retry
//     removes the leftovers.
//  5. Entry: loader/entries/terrarium-<slot>+<tries>.conf.new is written
//     and synced, then renamed to its .conf name (a new name, not one
//     that exists) and the directory synced: the commit. systemd-boot reads
//     only *.conf files, so before the rename the slot has no entry and
//     after it a complete one. Cut after: the install is complete.
//
// The running slot's entry, kernel, initramfs and partition are never
// written, opened for writing, or removed.
//
// # Staged, then armed
//
// Under Options.Stage, step 5 writes the entry under its .conf name with
// ".staged" added, which neither systemd-boot nor GRUB reads: the slot is
// written whole and checked, and the running slot still boots. Arm, later
// (a node of a cluster stages an upgrade while it still serves and arms
// it once drained), renames it to its .conf name and syncs the directory:
// the commit. Stage run again over the same staged upgrade writes
// nothing, Install of it only commits it, and step 2 of any other install
// removes it, so that Arm then refuses (ErrNotStaged).
//
// # How the new slot is tried next, and how it falls back
//
// The build writes loader.conf with "default terrarium-*" and gives each
// entry a sort-key. systemd-boot (src/boot/boot.c, boot_entry_compare and
// config_select_default_entry) sorts entries with no tries left
// ("+0-N") to the end of the list, then entries with a sort-key before
// those without, by sort-key ascending (then machine-id, version
// descending, id); it boots the first entry in that order whose id matches
// the default pattern. See the Boot Loader Specification's "Sorting" and
// systemd's "Automatic Boot Assessment".
//
// Install gives the target's entry a sort-key that sorts strictly before
// the running entry's, and a boot counter. So the next boot tries the new
// slot; a boot that passes the health check is blessed (the counter
// removed, package bootloader) and the new slot stays first; when every
// try failed its entry has no tries left, sorts last, and the running
// slot's entry (unchanged, blessed) boots again. The running entry is
// never rewritten to make room: keys count down instead. The build's
// keys are "terrarium-1" (the default slot) and "terrarium-2"; Install's
// are "terrarium-0-NNNNNNNNN", the first 999999999 and each next one one
// less than the running entry's, so that the most recently installed slot
// is always preferred, whatever the versions (a forced downgrade too),
// for a billion upgrades. The version line is the upgrade's version and
// plays no part in the order.
//
// No EFI variable is used (LoaderEntryOneShot would try the new slot once
// and need a second write to keep it; efivarfs is not there in tests): the
// ESP's files alone decide the next boot. An operator's `bootctl
// set-default` (LoaderEntryDefault) would override all of this.
//
// The new entry's kernel command line is the running entry's, with
// terrarium.slot set to the target and terrarium.reset-state and
// terrarium.rescue left out; its boot counter is Options.Tries (firstboot
// passes the running build's boot.tries, from its release.json), or the
// initial count of a counted entry on the ESP, or DefaultTries. A comment
// line records the rootfs's SHA-256, so that the same upgrade is known
// when it comes again.
package slotinstall
