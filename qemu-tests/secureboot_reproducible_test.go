//go:build e2e

package qemutests

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
)

// TestSecureBootReproducible: an image signed with a site's own keys builds
// twice the same, byte for byte: its signatures (the UKIs', systemd-boot's,
// the key enrollment's .auth files) hold no time. TestSecureBoot boots it.
func TestSecureBootReproducible(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootTimeout)
	defer cancel()
	keys := filepath.Join(t.TempDir(), "keys")
	_, err := secureboot.Generate(keys, "qemu-site")
	require.NoError(t, err)
	spec := secureBootSpecWith(t, keys, "[raw, qcow2, iso]")
	start := time.Now()
	m1 := buildSpec(ctx, t, spec, t.TempDir())
	m2 := buildSpec(ctx, t, spec, t.TempDir())
	t.Logf("built the Secure Boot image twice in %s", time.Since(start).Round(time.Second))
	for _, f := range []string{"raw", "qcow2", "iso"} {
		require.NotEmpty(t, m1.Outputs[f].SHA256, "%s in the manifest", f)
		assert.Equal(t, m1.Outputs[f].SHA256, m2.Outputs[f].SHA256, "two builds of a Secure Boot image's %s", f)
	}
}
