package nodestate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Settle's cases on their own, including a stored config the journal
// cannot stand behind.
func TestEnrollmentSettle(t *testing.T) {
	pending := &ConfigChange{Digest: "sha256:new", Generation: 4, Revokes: []string{"ed25519:k"}}
	tests := []struct {
		name, stored string
		pending      *ConfigChange
		did          string
		digest       string
		wantErr      bool
	}{
		{"nothing pending", "sha256:old", nil, SettleNothing, "sha256:old", false},
		{"stored before the cut", "sha256:new", pending, SettleFinished, "sha256:new", false},
		{"not stored before the cut", "sha256:old", pending, SettleDropped, "sha256:old", false},
		{"something else", "sha256:other", pending, SettleNothing, "sha256:old", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Enrollment{Digest: "sha256:old", Generation: 2}
			if tt.pending != nil {
				p := *tt.pending
				e.Pending = &p
			}
			did, err := e.Settle(tt.stored)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrStoredDigest)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.did, did)
			assert.Equal(t, tt.digest, e.Digest)
			assert.Nil(t, e.Pending)
			if did == SettleFinished {
				assert.Equal(t, uint64(4), e.Generation)
				assert.Equal(t, []string{"ed25519:k"}, e.RevokedKeys)
			}
		})
	}
}
