package efiboot

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSecureBoot(t *testing.T) {
	// attrs is NV|BS|RT, as efivarfs shows the firmware's variables.
	attrs := []byte{0x06, 0, 0, 0}
	tests := []struct {
		name       string
		secureBoot []byte // nil: absent
		setupMode  []byte
		want       SecureBootMode
		wantErr    string
	}{
		{name: "on", secureBoot: []byte{1}, setupMode: []byte{0}, want: SecureBootOn},
		{name: "off with a PK", secureBoot: []byte{0}, setupMode: []byte{0}, want: SecureBootOff},
		{name: "setup mode", secureBoot: []byte{0}, setupMode: []byte{1}, want: SecureBootSetup},
		{name: "no variable", want: SecureBootOff},
		{name: "too long", secureBoot: []byte{1, 0}, wantErr: "2 bytes, want 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.secureBoot != nil {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "SecureBoot-"+GlobalGUID), append(attrs, tt.secureBoot...), 0o644))
			}
			if tt.setupMode != nil {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "SetupMode-"+GlobalGUID), append(attrs, tt.setupMode...), 0o644))
			}
			got, err := Vars{Dir: dir}.SecureBoot()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	got, err := Vars{Dir: filepath.Join(t.TempDir(), "absent")}.SecureBoot()
	require.NoError(t, err)
	assert.Equal(t, SecureBootNone, got, "no efivarfs")
}
