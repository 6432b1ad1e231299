package firstboot

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStateEncryptionAdmissible(t *testing.T) {
	for _, tc := range []struct {
		name, required, inForce, because, problem string
	}{
		{name: "left to the machine, plain", required: "", inForce: "none"},
		{name: "left to the machine, encrypted", required: "", inForce: "tpm"},
		{name: "plain accepted", required: "none", inForce: "none"},
		{name: "required and encrypted", required: "tpm", inForce: "tpm"},
		{name: "required, no TPM", required: "tpm", inForce: "none", because: "this machine has no TPM 2.0", problem: "this node's is not (this machine has no TPM 2.0)"},
		{name: "required, an initramfs that does not say", required: "tpm", inForce: "", problem: "does not say that it is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := stateEncryptionAdmissible(tc.required, tc.inForce, tc.because)
			if tc.problem == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.problem)
			assert.Contains(t, err.Error(), `state.encryption: "tpm" requires TERRA-STATE encrypted`, "names the field")
			assert.Contains(t, err.Error(), "terrarium.reset-state", "names the fix")
		})
	}
}
