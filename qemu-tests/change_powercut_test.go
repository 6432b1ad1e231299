//go:build e2e

package qemutests

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

// TestPowerCutDuringSignedChange: the power is cut the moment a running
// node accepts a signed change from a hot-plugged stick, while it applies
// it. Powered on again without the stick, the node comes back healthy on
// one whole config, the old one or the new one, never a mix (the
// hostname, the status and the journal agree). Powered on once more with
// the stick, it ends on the new config; the old stick, signed but of a
// lower generation, is then refused as replayed.
func TestPowerCutDuringSignedChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*bootTimeout)
	defer cancel()
	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	key := newSSHKey(t)
	signKey, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	trust := "trustedKeys:\n  - " + pub.String() + "\n"
	first := adminConfig("node-1", key.authorized, trust)
	withGeneration := func(n, config string) string {
		return strings.Replace(config, "kind: MachineConfig\n", "kind: MachineConfig\ngeneration: "+n+"\n", 1)
	}
	changed := withGeneration("2", strings.Replace(adminConfig("node-2", key.authorized, trust), "name: admin", "name: ops", 1))
	older := withGeneration("1", adminConfig("node-old", key.authorized, trust))

	vm := m.boot(ctx, configAttached(m.configDisk("config.img", first)))
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	require.Equal(t, "provisioned", s.State, "%+v", s)
	expect(ctx, t, vm, `watching for signed config changes`)

	require.NoError(t, vm.HotplugDisk(ctx, stick(m.signedDisk("signed.img", changed, signKey))))
	expect(ctx, t, vm, `config change from \S+, generation 2, signed by `+pub.ID()+` .*: accepted`)
	require.NoError(t, vm.Quit(ctx), "the power cut")

	// Back without the stick: one whole config, healthy.
	vm = m.boot(ctx)
	s = expectStatus(ctx, t, vm, "verified", "changed", "failed")
	require.NotEqual(t, "failed", s.State, "%+v", s)
	require.NotNil(t, s.Healthy, "%+v", s)
	assert.True(t, *s.Healthy, "%+v", s)
	switch s.Hostname {
	case "node-1":
		assert.NotContains(t, s.Enrolled, "changed from", "the old hostname with the change recorded: %+v", s)
		t.Log("the cut landed before the change's config was stored: the node runs its enrolled config")
	case "node-2":
		assert.Contains(t, s.Enrolled, "changed from", "the new hostname without the change recorded: %+v", s)
		t.Log("the cut landed after the change's config was stored: the node runs the new config")
	default:
		t.Fatalf("hostname %q after the cut: neither config's", s.Hostname)
	}
	require.NoError(t, vm.Quit(ctx))

	// With the stick at power-on: the new config, whatever the cut left.
	vm = m.boot(ctx, configAttached(m.signedDisk("signed-again.img", changed, signKey)))
	s = expectStatus(ctx, t, vm, "verified", "changed", "failed")
	require.NotEqual(t, "failed", s.State, "%+v", s)
	assert.Equal(t, "node-2", s.Hostname, "%+v", s)
	require.NotNil(t, s.Healthy, "%+v", s)
	assert.True(t, *s.Healthy, "%+v", s)

	// An older stick, validly signed: replayed.
	require.NoError(t, vm.HotplugDisk(ctx, stick(m.signedDisk("older.img", older, signKey))))
	expect(ctx, t, vm, `it is replayed: its generation is 1 and this node already applied generation 2`)
	require.NoError(t, vm.Quit(ctx))
}
