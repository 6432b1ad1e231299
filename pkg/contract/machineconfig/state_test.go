package machineconfig

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
