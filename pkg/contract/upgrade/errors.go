package upgrade

import (
	"errors"
	"strings"
)

// Errors of reading and verifying an upgrade file: Open, Verify and
// CopyPart wrap them in an *Error that names the file and the member,
// Inspect returns them and ErrNoTrustedKeys. Test for them with errors.Is.
var (
	// ErrMalformed means the file is not an upgrade file as Write makes
	// it: not a tar archive, an unknown, repeated, missing or reordered
	// member, a header or padding Write never writes, a part whose size
	// differs from the manifest, a manifest that does not parse or
	// validate, or data after the end of the archive.
	ErrMalformed = errors.New("this is not an upgrade file as imagebuild writes it " +
		"(another file, or one edited or repacked); use the .upgrade file from `imagebuild build` unchanged")
	// ErrTruncated means the file ends before its last member does.
	ErrTruncated = errors.New("the upgrade file is cut short (an interrupted copy, or a full stick?); " +
		"copy it again from its source")
	// ErrUnsupportedFormat means the manifest's formatVersion is one this
	// program does not read.
	ErrUnsupportedFormat = errors.New("the upgrade file has a format this node does not read; " +
		"it needs an intermediate upgrade built by an imagebuild as old as the node's")
	// ErrUnsigned means the manifest has no signature member.
	ErrUnsigned = errors.New("the upgrade file is not signed; " +
		"build it with a signing key in the build spec")
	// ErrUnknownKey means the manifest is signed by a key not among the
	// trusted ones; the error names the key by its ID.
	ErrUnknownKey = errors.New("the upgrade file is signed by a key that is not trusted; " +
		"use an upgrade signed with a key the node's image or config trusts, " +
		"or add this key to the config's trustedKeys by a signed config change")
	// ErrBadSignature means the signature does not match the manifest: one
	// of them was changed after signing, or they come from two builds.
	ErrBadSignature = errors.New("the manifest's signature does not match it " +
		"(the file was damaged or changed after it was built); copy it again from its source")
	// ErrHashMismatch means a part's SHA-256 differs from the one in the
	// signed manifest; the error names the part.
	ErrHashMismatch = errors.New("a part does not match its SHA-256 in the signed manifest " +
		"(the file was damaged or changed after it was built); copy it again from its source")
	// ErrNoTrustedKeys means Inspect was given no key to trust: the file
	// was checked against the key it names, which proves it whole but not
	// who made it.
	ErrNoTrustedKeys = errors.New("no trusted key was given, so who signed it is not checked; " +
		"name the public half of the build spec's signing key as trusted")
)

// Refusals of Check, each naming the versions involved. Only
// ErrIncompatible cannot be overridden by Force.
var (
	// ErrAlreadyInstalled means the upgrade carries the version the node
	// runs: there is nothing to do.
	ErrAlreadyInstalled = errors.New("this version is already installed; there is nothing to do")
	// ErrDowngrade means the upgrade carries an older version than the
	// node runs.
	ErrDowngrade = errors.New("the upgrade is older than the installed version; " +
		"force it only if you mean to go back (Kubernetes cannot be downgraded by kubeadm)")
	// ErrTooOld means the installed version is below the upgrade's
	// minFromVersion.
	ErrTooOld = errors.New("the installed version is too old for this upgrade; " +
		"install an upgrade between the two versions first")
	// ErrIncompatible means the upgrade is for another kind of appliance
	// (another compatible name); it is never installed, even when forced.
	ErrIncompatible = errors.New("the upgrade is for another kind of appliance; " +
		"use an upgrade built from this node's build spec")
	// ErrInstalledVersion means the installed release's version is not a
	// semantic version, so no order of versions can be checked.
	ErrInstalledVersion = errors.New("the installed version is not a semantic version (MAJOR.MINOR.PATCH), " +
		"so the upgrade's versions cannot be checked against it; force the upgrade if it is the right one")
)

// Error is an error of reading or verifying an upgrade file. Err is one of
// the package's sentinel errors (or an I/O error), and Is and As see it
// through Unwrap.
type Error struct {
	// File names the upgrade file (WithName), or is "upgrade file".
	File string
	// Member is the archive member concerned (manifest.json,
	// manifest.json.sig or a part's name), or empty.
	Member string
	// Detail says what was found.
	Detail string
	// Err is what went wrong, with the fix in its text.
	Err error
}

// Error returns "FILE: member M: DETAIL: ERR", leaving out empty parts.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Member != "" {
		b.WriteString(": member ")
		b.WriteString(e.Member)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
