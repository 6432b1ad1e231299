// Package signature signs machine configs and checks their signatures:
// once a node is enrolled, it accepts a changed config only with a detached
// signature, made by a key it trusts (machineconfig.Config.TrustedKeys).
// The build host signs (`imagebuild config sign`, `imagebuild config
// cluster`) and the node verifies; both import this package, which uses
// ed25519 from the standard library only.
//
// A signature is a small text file beside the config, named after it with
// FileSuffix (machine.yaml.sig):
//
//	terrarium-signature v1
//	key ed25519:<base64 of the signer's 32-byte public key>
//	sig <base64 of the 64-byte ed25519 signature>
//
// The signature is over a line naming its purpose, "terrarium machine
// config signature v1\n" for a config (Sign, Verify), followed by the
// 32-byte SHA-256 of the file's bytes, never over the file alone, so that a
// signature made for one purpose can never be replayed as one for another
// (SignFor, VerifyFor). It covers the exact bytes: reformatting a signed
// file, even without changing its meaning, needs a new signature.
package signature

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
)

// FileSuffix names a config's signature file: machine.yaml's is
// machine.yaml.sig.
const FileSuffix = ".sig"

// MaxFileSize is the largest signature file Verify reads; one Sign writes
// is about 170 bytes.
const MaxFileSize = 4 << 10

// header is the first line of a signature file.
const header = "terrarium-signature v1"

// Purpose is what a signature is for: the line its signed message starts
// with, which keeps the purposes apart.
type Purpose string

const (
	// PurposeConfig signs machine configs (and, inside them, upgrade
	// manifests: package upgrade prefixes those with a line of its own).
	PurposeConfig Purpose = "terrarium machine config signature v1\n"
	// PurposeBundle signs a side-load bundle's index.json, which names
	// every manifest and through them every blob by digest.
	PurposeBundle Purpose = "terrarium bundle index signature v1\n"
	// PurposeUpgradeInstruction signs an instruction about one upgrade
	// file that a node's own checks would refuse (package upgrade's
	// Instruction: force it), made on the build or operator host and
	// carried beside the file or in the cluster's rollout record.
	PurposeUpgradeInstruction Purpose = "terrarium upgrade instruction signature v1\n"
)

// message returns what is signed for data.
func message(p Purpose, data []byte) []byte {
	sum := sha256.Sum256(data)
	return append([]byte(p), sum[:]...)
}

// Sign signs a machine config: SignFor(PurposeConfig, key, data).
func Sign(key ed25519.PrivateKey, data []byte) []byte { return SignFor(PurposeConfig, key, data) }

// Verify checks a machine config's signature: VerifyFor(PurposeConfig, …).
func Verify(sigFile, data []byte, trusted []PublicKey) (PublicKey, error) {
	return VerifyFor(PurposeConfig, sigFile, data, trusted)
}

// SignFor signs data for purpose p with key and returns the content of its
// signature file. Like ed25519.Sign, it panics when key is not
// ed25519.PrivateKeySize bytes long (ParsePrivateKey and GenerateKey never
// return such a key).
func SignFor(p Purpose, key ed25519.PrivateKey, data []byte) []byte {
	pub := PublicKeyOf(key)
	sig := ed25519.Sign(key, message(p, data))
	return fmt.Appendf(nil, "%s\nkey %s\nsig %s\n", header, pub, base64.StdEncoding.EncodeToString(sig))
}

// VerifyFor checks that sigFile, a signature file as SignFor writes it, is
// a signature of data for purpose p by one of the trusted keys, and
// returns that key. Its errors wrap ErrMalformed, ErrUnknownKey (naming the
// signer's key ID) or ErrBadSignature, checked in that order.
func VerifyFor(p Purpose, sigFile, data []byte, trusted []PublicKey) (PublicKey, error) {
	key, sig, err := parseFile(sigFile)
	if err != nil {
		return PublicKey{}, err
	}
	if !slices.Contains(trusted, key) {
		return PublicKey{}, fmt.Errorf("signed by key %s (%s): %w", key.ID(), key, ErrUnknownKey)
	}
	if !ed25519.Verify(key.key[:], message(p, data), sig) {
		return PublicKey{}, fmt.Errorf("signed by key %s: %w", key.ID(), ErrBadSignature)
	}
	return key, nil
}

// Signer returns the key a signature file names, without checking the
// signature: what a message about a refused signature names.
func Signer(sigFile []byte) (PublicKey, error) {
	key, _, err := parseFile(sigFile)
	return key, err
}

// parseFile returns the key and signature of a signature file, accepting
// exactly the form Sign writes (the final newline may be missing).
func parseFile(b []byte) (PublicKey, []byte, error) {
	malformed := func(format string, args ...any) (PublicKey, []byte, error) {
		return PublicKey{}, nil, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrMalformed)
	}
	if len(b) > MaxFileSize {
		return malformed("%d bytes, more than the %d a signature file may have", len(b), MaxFileSize)
	}
	if len(b) == 0 {
		return malformed("the file is empty")
	}
	lines := strings.Split(string(bytes.TrimSuffix(b, []byte("\n"))), "\n")
	if lines[0] != header {
		return malformed("the first line is %q, not %q", abbreviate(lines[0]), header)
	}
	if len(lines) < 3 {
		return malformed("%d lines instead of 3 (cut short?)", len(lines))
	}
	if len(lines) > 3 {
		return malformed("%d lines instead of 3", len(lines))
	}
	keyText, ok := strings.CutPrefix(lines[1], "key ")
	if !ok {
		return malformed("line 2 does not start with \"key \"")
	}
	key, err := ParsePublicKey(keyText)
	if err != nil {
		return malformed("line 2: %v", err)
	}
	sigText, ok := strings.CutPrefix(lines[2], "sig ")
	if !ok {
		return malformed("line 3 does not start with \"sig \"")
	}
	sig, err := base64.StdEncoding.DecodeString(sigText)
	if err != nil || base64.StdEncoding.EncodeToString(sig) != sigText {
		return malformed("line 3: the signature is not valid base64 (cut short?)")
	}
	if len(sig) != ed25519.SignatureSize {
		return malformed("line 3: the signature has %d bytes; an ed25519 signature has %d", len(sig), ed25519.SignatureSize)
	}
	return key, sig, nil
}
