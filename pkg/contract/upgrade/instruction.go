package upgrade

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// An Instruction is a signed word about one upgrade file that a node's
// own checks would refuse: force it (install a downgrade, the same
// version again, or an upgrade that rolled back before, on this node or
// anywhere in its cluster). It is made where the keys trusted for
// upgrades are kept, on the build or operator host (`imagebuild upgrade
// force`), and travels beside the upgrade file (terrarium-0.2.0.upgrade
// and terrarium-0.2.0.upgrade.force on the stick) and, in a cluster, with
// the rollout's record, where every node checks it before it acts on it.
// Nothing else makes a node force an upgrade it did not force itself.
//
// Its file is text: the instruction's lines, then their signature in
// package signature's format, made for signature.PurposeUpgradeInstruction
// over the instruction's lines (the first four, with their newlines):
//
//	terrarium upgrade instruction v1
//	force sha256:<hex SHA-256 of the upgrade's manifest.json>
//	version 0.2.0
//	expires <RFC 3339 time, UTC>
//	terrarium-signature v1
//	key ed25519:<base64 of the signer's public key>
//	sig <base64 of the signature>
//
// An instruction names the upgrade by its digest (Digest), so it forces
// that file and no other, and it expires, so that one kept after its
// rollout cannot force the same (older) file back onto a cluster that
// moved on. The expiry is judged on the node's clock.
type Instruction struct {
	Action  Action
	Digest  string
	Version string
	// Expires is when the instruction stops being honored (UTC, whole
	// seconds).
	Expires time.Time
}

// Action is what an instruction asks.
type Action string

// ActionForce asks to install the upgrade whatever the node's refusals that
// force overrides (never an incompatible one, nor one that breaks
// Kubernetes' version skew).
const ActionForce Action = "force"

// InstructionSuffix names an instruction beside its upgrade file:
// terrarium-0.2.0.upgrade's is terrarium-0.2.0.upgrade.force.
const InstructionSuffix = ".force"

// MaxInstructionSize is the most an instruction file may hold; one
// SignInstruction writes is about 330 bytes.
const MaxInstructionSize = 4 << 10

// instructionHeader is an instruction's first line.
const instructionHeader = "terrarium upgrade instruction v1"

// Errors of reading and checking an instruction; VerifyInstruction's
// errors also wrap signature.ErrUnknownKey or signature.ErrBadSignature.
var (
	// ErrInstructionMalformed: not an instruction as SignInstruction
	// writes it.
	ErrInstructionMalformed = errors.New("this is not an upgrade instruction as `imagebuild upgrade force` writes it")
	// ErrInstructionOther: a valid instruction about another upgrade file.
	ErrInstructionOther = errors.New("the instruction is about another upgrade file")
	// ErrInstructionExpired: the instruction's time is over.
	ErrInstructionExpired = errors.New("the instruction has expired; make a new one with `imagebuild upgrade force`")
)

// isDigest reports whether s is "sha256:" and 64 lowercase hex digits.
func isDigest(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}

// isVersion reports whether s may be a version on an instruction's line:
// 1 to 64 letters, digits and . + ~ -, starting with a letter or digit.
func isVersion(s string) bool {
	if s == "" || len(s) > 64 || strings.ContainsAny(s[:1], ".+~-") {
		return false
	}
	return strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.+~-") == ""
}

// Validate says what keeps in from being written or honored.
func (in Instruction) Validate() error {
	var bad []string
	if in.Action != ActionForce {
		bad = append(bad, fmt.Sprintf("action %q: the only action is %q", in.Action, ActionForce))
	}
	if !isDigest(in.Digest) {
		bad = append(bad, fmt.Sprintf("digest %q is not sha256:<64 hex digits>", abbreviate(in.Digest)))
	}
	if !isVersion(in.Version) {
		bad = append(bad, fmt.Sprintf("version %q is not a version", abbreviate(in.Version)))
	}
	if in.Expires.IsZero() || !in.Expires.Equal(in.Expires.UTC().Truncate(time.Second)) || in.Expires.Year() > 9999 {
		bad = append(bad, "the expiry must be a time in whole seconds")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(bad, "; "), ErrInstructionMalformed)
	}
	return nil
}

// abbreviate shortens s for an error message.
func abbreviate(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// body is the instruction's signed lines.
func (in Instruction) body() []byte {
	return fmt.Appendf(nil, "%s\n%s %s\nversion %s\nexpires %s\n",
		instructionHeader, in.Action, in.Digest, in.Version, in.Expires.UTC().Format(time.RFC3339))
}

// SignInstruction returns the file of in, signed with key. in is checked
// first (Validate).
func SignInstruction(key ed25519.PrivateKey, in Instruction) ([]byte, error) {
	in.Expires = in.Expires.UTC()
	if err := in.Validate(); err != nil {
		return nil, fmt.Errorf("sign upgrade instruction: %w", err)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign upgrade instruction: the key is %d bytes; an ed25519 private key has %d", len(key), ed25519.PrivateKeySize)
	}
	body := in.body()
	return append(body, signature.SignFor(signature.PurposeUpgradeInstruction, key, body)...), nil
}

// ParseInstruction reads an instruction file without checking its
// signature (VerifyInstruction does): what a message about it may show.
// It accepts exactly what SignInstruction writes (the final newline may
// be missing); its errors wrap ErrInstructionMalformed.
func ParseInstruction(file []byte) (Instruction, error) {
	in, _, _, err := parseInstruction(file)
	return in, err
}

// parseInstruction returns the instruction, its signed lines and its
// signature file.
func parseInstruction(file []byte) (Instruction, []byte, []byte, error) {
	malformed := func(format string, args ...any) (Instruction, []byte, []byte, error) {
		return Instruction{}, nil, nil, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInstructionMalformed)
	}
	if len(file) > MaxInstructionSize {
		return malformed("%d bytes, more than the %d an instruction may have", len(file), MaxInstructionSize)
	}
	lines := strings.Split(string(bytes.TrimSuffix(file, []byte("\n"))), "\n")
	if len(lines) != 7 {
		return malformed("%d lines instead of 7 (the instruction's 4 and its signature's 3)", len(lines))
	}
	if lines[0] != instructionHeader {
		return malformed("the first line is %q, not %q", abbreviate(lines[0]), instructionHeader)
	}
	action, digest, ok := strings.Cut(lines[1], " ")
	if !ok {
		return malformed("line 2 is not \"force sha256:…\"")
	}
	version, ok := strings.CutPrefix(lines[2], "version ")
	if !ok {
		return malformed("line 3 does not start with \"version \"")
	}
	expiresText, ok := strings.CutPrefix(lines[3], "expires ")
	if !ok {
		return malformed("line 4 does not start with \"expires \"")
	}
	expires, err := time.Parse(time.RFC3339, expiresText)
	if err != nil {
		return malformed("line 4: the expiry is not a time (RFC 3339, UTC)")
	}
	in := Instruction{Action: Action(action), Digest: digest, Version: version, Expires: expires.UTC()}
	if err := in.Validate(); err != nil {
		return Instruction{}, nil, nil, err
	}
	body := in.body()
	if !bytes.HasPrefix(file, body) {
		return malformed("the instruction is not written as imagebuild writes it")
	}
	return in, body, []byte(strings.Join(lines[4:], "\n") + "\n"), nil
}

// VerifyInstruction checks that file is an instruction signed by one of
// the trusted keys and returns it and the key. Its errors wrap
// ErrInstructionMalformed (of the instruction or of its signature),
// signature.ErrUnknownKey (naming the signer's key) or
// signature.ErrBadSignature.
func VerifyInstruction(file []byte, trusted []signature.PublicKey) (Instruction, signature.PublicKey, error) {
	in, body, sig, err := parseInstruction(file)
	if err != nil {
		return Instruction{}, signature.PublicKey{}, err
	}
	key, err := signature.VerifyFor(signature.PurposeUpgradeInstruction, sig, body, trusted)
	if errors.Is(err, signature.ErrMalformed) {
		return Instruction{}, signature.PublicKey{}, fmt.Errorf("its signature: %w: %w", err, ErrInstructionMalformed)
	}
	if err != nil {
		return Instruction{}, signature.PublicKey{}, err
	}
	return in, key, nil
}

// Check says whether in forces the upgrade of digest and version at now
// (the node's clock): its errors wrap ErrInstructionOther or
// ErrInstructionExpired, and name both sides.
func (in Instruction) Check(digest, version string, now time.Time) error {
	if in.Digest != digest || in.Version != version {
		return fmt.Errorf("%w: it forces %s (%s), not %s (%s)", ErrInstructionOther, in.Version, in.Digest, version, digest)
	}
	if !now.Before(in.Expires) {
		return fmt.Errorf("%w: it was valid until %s, and this node's clock reads %s",
			ErrInstructionExpired, in.Expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// String describes in for a person: "force 0.2.0 (sha256:…) until …".
func (in Instruction) String() string {
	return fmt.Sprintf("%s %s (%s) until %s", in.Action, in.Version, in.Digest, in.Expires.UTC().Format(time.RFC3339))
}
