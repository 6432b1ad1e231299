package machineconfig

import (
	"math"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// State tunes how the node uses its TERRA-STATE partition.
type State struct {
	// ReserveMiB is the free space, in MiB, that side-loads, upgrade
	// shares and backups leave on TERRA-STATE for etcd and the node's own
	// writes: one that would leave less is refused before it writes,
	// naming the sizes. 0 means the default (DefaultStateReserveMiB).
	ReserveMiB uint64 `yaml:"reserveMiB,omitempty"`
	// Encryption is the encryption the node requires of TERRA-STATE:
	// "tpm" (LUKS2, its key sealed by the machine's TPM: a node whose
	// STATE is not so refuses the config, by name, and waits for
	// another) or "none" (a plain STATE is accepted without a warning).
	// Absent: a machine with a TPM encrypts, one without runs plain and
	// warns at every boot (docs/state-encryption.md).
	Encryption string `yaml:"encryption,omitempty"`
	// RecoveryKey is the public half of the cluster's escrow key
	// ("x25519:" and base64, as imagebuild config cluster writes it): an
	// encrypted TERRA-STATE's recovery key is derived against it, so that
	// the operator recovers it from the node's recovery code with the
	// cluster's secrets (imagebuild config recovery-key). Absent: the
	// node draws one and shows it once on its console.
	RecoveryKey string `yaml:"recoveryKey,omitempty"`
}

// StateEncryption is the encryption the config requires of TERRA-STATE
// (layout.StateEncryptionTPM, layout.StateEncryptionNone), or "" when it
// leaves it to the machine.
func (c *Config) StateEncryption() string {
	if c.State == nil {
		return ""
	}
	return c.State.Encryption
}

// StateRecoveryKey is the escrow key TERRA-STATE's recovery key is
// derived against (State.RecoveryKey), or "".
func (c *Config) StateRecoveryKey() string {
	if c.State == nil {
		return ""
	}
	return c.State.RecoveryKey
}

func validateState(ps *strictyaml.Problems, at strictyaml.Path, s State) {
	if s.RecoveryKey != "" {
		if _, err := recoverykey.ParsePublicKey(s.RecoveryKey); err != nil {
			ps.Addf(at.Field("recoveryKey"), "not an escrow public key: %v", err)
		}
	}
	switch s.Encryption {
	case "", layout.StateEncryptionTPM, layout.StateEncryptionNone:
	default:
		ps.Addf(at.Field("encryption"), "%q is not an encryption; use %q (require TERRA-STATE encrypted with a key the TPM seals) or %q (accept it plain), or leave it out (encrypted where the machine has a TPM)",
			s.Encryption, layout.StateEncryptionTPM, layout.StateEncryptionNone)
	}
}

// DefaultStateReserveMiB is State.ReserveMiB's default: room for etcd's
// write-ahead log (five 64 MiB segments), a database of a few hundred MiB
// and a snapshot of it, and the node's logs. It is a quarter or less of
// TERRA-STATE on the disks the project tests (an 8 GiB disk leaves STATE
// about 4.7 GiB beside the ESP and two 1.5 GiB slots; a STATE disk of its
// own is 4 GiB), which leaves room for an upgrade file (about 600 MiB)
// and side-loaded applications.
const DefaultStateReserveMiB = 1024

// StateReserveBytes is the reserve the config asks for, in bytes.
func (c *Config) StateReserveBytes() uint64 {
	mib := uint64(DefaultStateReserveMiB)
	if c.State != nil && c.State.ReserveMiB != 0 {
		mib = c.State.ReserveMiB
	}
	if mib > math.MaxUint64>>20 {
		return math.MaxUint64 // more than any disk: everything is refused
	}
	return mib << 20
}
