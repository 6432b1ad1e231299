package statecrypt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
	"github.com/terrarium-os/terrarium/pkg/testvm/swtpm"
)

// created is a volume Create made with tpm's sealed key.
func created(t *testing.T, tpm *swtpm.TPM) (Volume, *dmlessRunner) {
	t.Helper()
	v, _ := newVolume(t)
	run := &dmlessRunner{}
	v.Run = run
	_, err := Create(context.Background(), v, tpm, "TERRA-STATE-LUKS", "terrarium-state", func(context.Context, string) error { return nil })
	require.NoError(t, err)
	return v, run
}

func TestRecoveryOpensAndReseals(t *testing.T) {
	ctx := context.Background()
	tpm := swtpm.Start(t, "")
	tpm.Extend(t, tpmseal.SecureBootPCR, "SecureBoot=0")
	v, _ := created(t, tpm)
	pass := randomKey(t)

	require.NoError(t, AddRecovery(ctx, v, tpm, pass, Token{Escrow: "0123456789abcdef", Code: "code"}))
	tok, ok, err := Recovery(v)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"1"}, tok.Keyslots)
	assert.Equal(t, "0123456789abcdef", tok.Escrow)
	require.ErrorIs(t, AddRecovery(ctx, v, tpm, pass, Token{}), ErrHasRecovery)

	dev, err := UnlockWithRecovery(ctx, v, pass, "terrarium-state")
	require.NoError(t, err)
	assert.Equal(t, "/dev/mapper/terrarium-state", dev)
	_, err = UnlockWithRecovery(ctx, v, randomKey(t), "terrarium-state")
	require.ErrorIs(t, err, ErrWrongKey)

	// The disk in another machine: its TPM does not unseal; the recovery
	// key reseals to it, and then only it opens the volume.
	other := swtpm.Start(t, "")
	other.Extend(t, tpmseal.SecureBootPCR, "SecureBoot=0")
	_, err = Unlock(ctx, v, other, "terrarium-state")
	require.ErrorIs(t, err, tpmseal.ErrOtherTPM)
	require.NoError(t, Reseal(ctx, v, other, pass))
	_, err = Unlock(ctx, v, other, "terrarium-state")
	require.NoError(t, err, "the new machine's TPM opens it")
	_, err = Unlock(ctx, v, tpm, "terrarium-state")
	require.ErrorIs(t, err, tpmseal.ErrOtherTPM, "the old machine's does not")
	h, err := v.Header()
	require.NoError(t, err)
	assert.Len(t, h.All(TokenTPM), 1, "the old sealed key is gone")
	assert.Equal(t, []string{"1", "2"}, h.Keyslots, "the old keyslot is wiped; the recovery key's stays")
	_, err = UnlockWithRecovery(ctx, v, pass, "terrarium-state")
	require.NoError(t, err, "the recovery key still opens it")

	// Resealing again (the Secure Boot keys changed) reuses keyslot 0.
	other.Extend(t, tpmseal.SecureBootPCR, "db: the site's key")
	_, err = Unlock(ctx, v, other, "terrarium-state")
	require.ErrorIs(t, err, tpmseal.ErrPolicy)
	require.NoError(t, Reseal(ctx, v, other, pass))
	_, err = Unlock(ctx, v, other, "terrarium-state")
	require.NoError(t, err)
	h, err = v.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "1"}, h.Keyslots)
}

func TestRecoveryAfterAPowerCut(t *testing.T) {
	ctx := context.Background()
	tpm := swtpm.Start(t, "")
	v, _ := created(t, tpm)
	h, err := v.Header()
	require.NoError(t, err)
	key, _, err := unseal(v, h, tpm)
	require.NoError(t, err)

	// A cut after the recovery keyslot was added, before its token: the
	// next try replaces the keyslot.
	require.NoError(t, v.AddKey(ctx, key, randomKey(t), RecoverySlot))
	pass := randomKey(t)
	require.NoError(t, AddRecovery(ctx, v, tpm, pass, Token{}))
	_, err = UnlockWithRecovery(ctx, v, pass, "terrarium-state")
	require.NoError(t, err)

	// A cut in a reseal after the new keyslot, before its token: a
	// keyslot no token names, which the next reseal wipes.
	require.NoError(t, v.AddKey(ctx, pass, randomKey(t), 2))
	require.NoError(t, Reseal(ctx, v, tpm, pass))
	h, err = v.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"1", "2"}, h.Keyslots)

	// A cut after the new token, before the old one went: both sealed
	// keys are there, and Unlock finds the one that opens.
	require.NoError(t, v.ImportToken(ctx, Token{Type: TokenTPM, Keyslots: []string{"2"}, Sealed: h.Tokens[h.All(TokenTPM)[0]].Sealed}))
	_, err = Unlock(ctx, v, tpm, "terrarium-state")
	require.NoError(t, err)
}
