package upgrade

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// Digest identifies an upgrade file by its manifest: "sha256:" and the
// hex SHA-256 of manifest.json's bytes. Open accepts a manifest only in
// the form Marshal writes, so one manifest has one digest, and the
// manifest names every part's SHA-256, so the digest names the whole
// file. Nodes record upgrades by it (bad marks, a rollout's upgrade).
func Digest(manifest []byte) string {
	sum := sha256.Sum256(manifest)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SignedManifest returns manifest.json and manifest.json.sig as the file
// holds them: what a node hands its cluster's rollout so that every node
// checks, with VerifyManifest, what it is asked to install before it
// fetches the file.
func (f *File) SignedManifest() (manifest, sig []byte) {
	return append([]byte(nil), f.raw...), append([]byte(nil), f.sig...)
}

// VerifyManifest checks that sig is a signature of manifest
// (manifest.json and manifest.json.sig of an upgrade file, as
// SignedManifest returns them) by one of the trusted keys, and returns
// the manifest and the key. name names them in errors. Its errors are
// *Error values wrapping ErrMalformed (a manifest that does not parse, a
// malformed signature), ErrUnknownKey or ErrBadSignature, as Verify's
// are. The parts are not checked: they are, by Verify, when the file
// itself is read.
func VerifyManifest(name string, manifest, sig []byte, trusted []signature.PublicKey) (Manifest, signature.PublicKey, error) {
	if len(manifest) > MaxManifestSize {
		return Manifest{}, signature.PublicKey{}, &Error{File: name, Member: ManifestName,
			Detail: fmt.Sprintf("%d bytes, more than the %d a manifest may have", len(manifest), MaxManifestSize), Err: ErrMalformed}
	}
	f := &File{name: name, raw: manifest, sig: sig}
	key, err := f.verifySignature(trusted)
	if err != nil {
		return Manifest{}, signature.PublicKey{}, err
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return Manifest{}, signature.PublicKey{}, &Error{File: name, Member: ManifestName, Detail: err.Error(), Err: ErrMalformed}
	}
	return m, key, nil
}
