package clustersecrets

import (
	"fmt"
	"io"

	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
)

// EnsureRecoveryKey gives s a recovery escrow key when it has none
// (secrets made before there was one), drawn from random (nil:
// crypto/rand.Reader), and reports whether it added one. The caller saves
// s: every node's recovery key is derived against it. A key s already has
// is left alone.
func (s *Secrets) EnsureRecoveryKey(random io.Reader) (bool, error) {
	if s.RecoveryKey != "" {
		return false, nil
	}
	e, err := recoverykey.NewEscrow(random)
	if err != nil {
		return false, err
	}
	s.RecoveryKey = e.String()
	return true, nil
}

// RecoveryEscrow returns the cluster's recovery escrow key, or an error
// when s has none.
func (s *Secrets) RecoveryEscrow() (recoverykey.Escrow, error) {
	if s.RecoveryKey == "" {
		return recoverykey.Escrow{}, fmt.Errorf("these secrets have no recoveryKey (made before there was one): run imagebuild config cluster with them once to add one; nodes enrolled before then show their recovery key on their console instead")
	}
	e, err := recoverykey.ParseEscrow(s.RecoveryKey)
	if err != nil {
		return recoverykey.Escrow{}, fmt.Errorf("recoveryKey: %w", err)
	}
	return e, nil
}
