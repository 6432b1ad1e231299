// Package upgrade is the format of Terrarium's upgrade file,
// terrarium-<version>.upgrade: everything a node writes into its inactive
// slot (the slot's squashfs, and the kernel and initramfs that go to the
// ESP), with a signed manifest that says what it is and what it upgrades.
// imagebuild writes it (Write) and firstboot reads it (Open, Verify,
// Check); both import this package, so the two sides cannot drift.
//
// An upgrade file is a POSIX ustar archive that Write makes byte for byte
// reproducibly, and that Open accepts only in exactly that form:
//
//	manifest.json      the Manifest, as Marshal writes it (at most 1 MiB)
//	manifest.json.sig  its detached signature (package signature's format)
//	<part> ...         the parts, in the manifest's order
//	two zero blocks    the end of the archive, and nothing after it
//
// Every member is a regular file with mode 0644, owner 0:0 and no user or
// group names, dated the manifest's BuiltAt; its data is padded with zeros
// to a multiple of 512 bytes. Any other header, an unknown, missing,
// repeated or reordered member, a part of another size than the manifest
// says, bytes after the end, or a file cut short is refused. Tools such as
// `tar tvf` list the file and `tar xf` extracts its parts.
//
// The manifest is signed with package signature (ed25519, its signature
// file format), over the manifest's bytes prefixed with the line
// "terrarium upgrade manifest v1", so that no signature made for a
// machine config verifies as one for an upgrade manifest, and no upgrade
// signature as one for a config.
//
// A node trusts nothing in the file before Verify: the manifest's
// signature must be by a trusted key, and then every part is read through
// SHA-256 and compared with the manifest, all before the caller writes a
// byte. The Verified value it returns hands out the parts, and CopyPart
// hashes each again while copying it into the slot, so that a file
// changed after verification is still caught before the slot is used.
package upgrade
