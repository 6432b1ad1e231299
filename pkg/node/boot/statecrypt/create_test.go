package statecrypt

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/boot/tpmseal"
	"github.com/terrarium-os/terrarium/pkg/testvm/swtpm"
)

// dmlessRunner runs this machine's cryptsetup but maps nothing, since the
// tests have no device mapper: an open checks its key against the volume
// (cryptsetup open --test-passphrase) and records the name it would map.
type dmlessRunner struct {
	opened, closed []string
}

func (r *dmlessRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return slices.Contains(common, a) })
	switch {
	case name == "cryptsetup" && args[0] == "open":
		mapped := args[len(args)-1]
		args = append([]string{"open", "--test-passphrase"}, args[1:len(args)-1]...)
		defer func() { r.opened = append(r.opened, mapped) }()
	case name == "cryptsetup" && args[0] == "close":
		r.closed = append(r.closed, args[1])
		return nil, nil
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	return cmd.CombinedOutput()
}

func TestCreateThenUnlock(t *testing.T) {
	ctx := context.Background()
	tpm := swtpm.Start(t, "")
	tpm.Extend(t, tpmseal.SecureBootPCR, "SecureBoot=0")
	v, _ := newVolume(t) // a volume to make again: Create erases it
	run := &dmlessRunner{}
	v.Run = run
	var made []string
	dev, err := Create(ctx, v, tpm, "TERRA-STATE-LUKS", "terrarium-state", func(_ context.Context, dev string) error {
		made = append(made, dev)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "/dev/mapper/terrarium-state", dev)
	assert.Equal(t, []string{dev}, made, "the filesystem is made on the opened volume")
	h, err := v.Header()
	require.NoError(t, err)
	assert.Equal(t, "TERRA-STATE-LUKS", h.Label)
	assert.Equal(t, []string{"0"}, h.Keyslots, "one key, the sealed one")

	dev, err = Unlock(ctx, v, tpm, "terrarium-state")
	require.NoError(t, err, "the TPM's key opens the volume")
	assert.Equal(t, "/dev/mapper/terrarium-state", dev)
	assert.Equal(t, []string{"terrarium-state", "terrarium-state"}, run.opened)

	require.NoError(t, Close(ctx, run, "terrarium-state"))
	assert.Equal(t, []string{"terrarium-state"}, run.closed)

	_, err = Unlock(ctx, v, nil, "terrarium-state")
	require.ErrorIs(t, err, ErrNoTPM)

	tpm.Extend(t, tpmseal.SecureBootPCR, "db: another certificate")
	_, err = Unlock(ctx, v, tpm, "terrarium-state")
	require.ErrorIs(t, err, tpmseal.ErrPolicy)
	assert.Contains(t, err.Error(), v.Device)

	_, err = Unlock(ctx, v, swtpm.Start(t, ""), "terrarium-state")
	require.ErrorIs(t, err, tpmseal.ErrOtherTPM)
}

func TestUnlockTellsAnUnfinishedVolume(t *testing.T) {
	ctx := context.Background()
	tpm := swtpm.Start(t, "")
	v, _ := newVolume(t)
	run := &dmlessRunner{}
	v.Run = run
	// A power cut while the filesystem was made: no token yet.
	_, err := Create(ctx, v, tpm, "TERRA-STATE-LUKS", "terrarium-state", func(context.Context, string) error {
		return errors.New("power cut")
	})
	require.ErrorContains(t, err, "power cut")
	_, err = Unlock(ctx, v, tpm, "terrarium-state")
	require.ErrorIs(t, err, ErrUnfinished)

	// A volume with only a recovery key is not unfinished.
	require.NoError(t, v.ImportToken(ctx, Token{Type: TokenRecovery, Keyslots: []string{"0"}}))
	_, err = Unlock(ctx, v, tpm, "terrarium-state")
	require.ErrorIs(t, err, ErrNoSealedKey)
}
