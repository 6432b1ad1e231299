package spec

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/ova"
)

func TestVSphereDefaults(t *testing.T) {
	tests := []struct {
		name    string
		add     string
		outputs []string
		want    int
	}{
		{"ova gets the default", "outputs: [ova]\n", []string{OutputOVA}, ova.DefaultHardwareVersion},
		{"ova with a version", "outputs: [vmdk, ova]\nvsphere:\n  hardwareVersion: 19\n", []string{OutputVMDK, OutputOVA}, 19},
		{"no ova, no version", "outputs: [raw, vmdk]\n", []string{OutputRaw, OutputVMDK}, 0},
		{"default outputs", "", []string{OutputRaw, OutputQCOW2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(writeFile(t, t.TempDir(), "spec.yaml", minimalSpec+tt.add))
			require.NoError(t, err)
			assert.Equal(t, tt.outputs, s.Outputs)
			assert.Equal(t, tt.want, s.VSphere.HardwareVersion)
			for _, o := range outputs() {
				assert.Equal(t, slices.Contains(tt.outputs, o), s.WantsOutput(o), o)
			}
		})
	}
}
