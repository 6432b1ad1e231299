package machineconfig

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/recoverykey"
)

func TestStateReserveBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want uint64
	}{
		{"absent: the default", "", DefaultStateReserveMiB << 20},
		{"zero: the default", "state:\n  reserveMiB: 0\n", DefaultStateReserveMiB << 20},
		{"its own", "state:\n  reserveMiB: 2048\n", 2 << 30},
		{"more than any disk", "state:\n  reserveMiB: 18446744073709551615\n", math.MaxUint64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("machine.yaml", []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n1\n"+tc.yaml))
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.StateReserveBytes())
		})
	}
}

func TestStateEncryption(t *testing.T) {
	const header = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n1\n"
	for _, tc := range []struct {
		name, yaml, want, problem string
	}{
		{name: "absent: the machine's", want: ""},
		{name: "required", yaml: "state:\n  encryption: tpm\n", want: "tpm"},
		{name: "plain accepted", yaml: "state:\n  encryption: none\n", want: "none"},
		{name: "unknown", yaml: "state:\n  encryption: luks\n", problem: `state.encryption: "luks" is not an encryption; use "tpm"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("machine.yaml", []byte(header+tc.yaml))
			if tc.problem != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.problem)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.StateEncryption())
		})
	}
}

func TestStateRecoveryKey(t *testing.T) {
	const header = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n1\n"
	e, err := recoverykey.NewEscrow(nil)
	require.NoError(t, err)
	pub := e.Public().String()
	c, err := Parse("machine.yaml", []byte(header+"state:\n  recoveryKey: "+pub+"\n"))
	require.NoError(t, err)
	assert.Equal(t, pub, c.StateRecoveryKey())

	c, err = Parse("machine.yaml", []byte(header))
	require.NoError(t, err)
	assert.Empty(t, c.StateRecoveryKey(), "absent: the node shows its own")

	_, err = Parse("machine.yaml", []byte(header+"state:\n  recoveryKey: AAAA\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `state.recoveryKey: not an escrow public key: want "x25519:"`)
}
