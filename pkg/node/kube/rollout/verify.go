package rollout

import (
	"errors"
	"fmt"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// Verified is what a node may act on in a rollout whose instructions it
// checked with the keys it trusts for upgrades (Record.Verify).
type Verified struct {
	// Manifest is the upgrade's signed manifest, nil when the record
	// carries none: a rollout started by a node of a release before
	// signed rollouts, whose upgrade file, verified when it is fetched,
	// is then the only proof of what the node installs.
	Manifest *upgrade.Manifest
	// Force is the rollout's force instruction, signed by a trusted key
	// for this upgrade and not expired; nil when it has none.
	Force *upgrade.Instruction
	// ForceSigner is the key that signed Force.
	ForceSigner signature.PublicKey
	// UnsignedForce: the record says the rollout is forced, but no force
	// instruction a trusted key signed comes with it (a record written by
	// a node of an older release). The node installs the upgrade only as
	// it would unforced.
	UnsignedForce bool
}

// ErrUnverified means the rollout's instructions do not verify, or say
// something else than the record; the node acts on nothing in it.
var ErrUnverified = errors.New("the rollout's instructions do not verify, so this node does not act on them")

// Verify checks the current rollout's instructions with the keys this
// node trusts for upgrades, at now (the node's clock, for a force
// instruction's expiry): the upgrade file's manifest must be signed by a
// trusted key, its digest, version and Kubernetes must be the record's,
// and a force instruction must be signed by a trusted key for this
// upgrade, unexpired. Its errors wrap ErrUnverified and say what does not
// hold. A record without instructions for this upgrade (a rollout
// started by a node of a release before signed rollouts) verifies with
// no Manifest, forcing nothing.
func (r *Record) Verify(trusted []signature.PublicKey, now time.Time) (Verified, error) {
	ro := r.Rollout
	if ro == nil {
		return Verified{}, fmt.Errorf("%w: the record holds no rollout", ErrUnverified)
	}
	in := r.Instructions
	if in == nil || in.Digest != ro.Digest || (in.Manifest == "" && in.Force == "") {
		return Verified{UnsignedForce: ro.Forced}, nil
	}
	fail := func(format string, args ...any) (Verified, error) {
		return Verified{}, fmt.Errorf("%w: %s", ErrUnverified, fmt.Sprintf(format, args...))
	}
	if in.Manifest == "" {
		return fail("it carries a force instruction without the upgrade's signed manifest")
	}
	m, _, err := upgrade.VerifyManifest("the rollout's upgrade manifest", []byte(in.Manifest), []byte(in.ManifestSignature), trusted)
	if err != nil {
		return fail("%v", err)
	}
	if d := upgrade.Digest([]byte(in.Manifest)); d != ro.Digest {
		return fail("the record names the upgrade %s, and its signed manifest is %s", ro.Digest, d)
	}
	if m.Version != ro.Version {
		return fail("the record names version %s, and its signed manifest says %s", ro.Version, m.Version)
	}
	if m.KubernetesVersion != ro.Kubernetes {
		return fail("the record names Kubernetes %q, and its signed manifest says %q", ro.Kubernetes, m.KubernetesVersion)
	}
	v := Verified{Manifest: &m}
	if in.Force == "" {
		v.UnsignedForce = ro.Forced
		return v, nil
	}
	fi, key, err := upgrade.VerifyInstruction([]byte(in.Force), trusted)
	if err != nil {
		return fail("its force instruction: %v", err)
	}
	if err := fi.Check(ro.Digest, ro.Version, now); err != nil {
		return fail("its force instruction: %v", err)
	}
	v.Force, v.ForceSigner = &fi, key
	return v, nil
}
