package firstboot

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// trustingFor adds keys with their purposes to a config's trustedKeys.
func trustingFor(config string, keys map[*signer][]machineconfig.KeyPurpose, order ...*signer) string {
	config += "trustedKeys:\n"
	for _, s := range order {
		ps := keys[s]
		if len(ps) == 0 {
			config += "  - " + s.pub.String() + "\n"
			continue
		}
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = string(p)
		}
		config += fmt.Sprintf("  - key: %s\n    purposes: [%s]\n", s.pub, strings.Join(names, ", "))
	}
	return config
}

func hostnamed(config, name string) string {
	return strings.Replace(config, "hostname: node-1", "hostname: "+name, 1)
}

// A signed config at or below the generation the node applied is a
// replay: refused by name, nothing changes. An enrolled node whose config
// had no generation takes a first change from generation 1.
func TestReplayedConfigRefused(t *testing.T) {
	sig := newSigner(t)
	e := enrolled(t, sig.trusting(fullConfig))
	assert.Zero(t, e.journal().Enrollment.Generation)

	// No generation on a node at 0: a replay of the enrolled generation.
	require.NoError(t, e.runWithProviders(sig.stick(hostnamed(sig.trusting(fullConfig), "node-0"))))
	assert.Contains(t, e.console.String(), "REFUSED")
	assert.Contains(t, e.console.String(), "it is replayed: its generation is 0 and this node already applied generation 0; a change needs generation: 1 or higher")
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"))

	// Generation 3 applies and is recorded.
	e.setBootID("33333333-3333-3333-3333-333333333333")
	e.console.Reset()
	require.NoError(t, e.runWithProviders(sig.stick(withGen(3, hostnamed(sig.trusting(fullConfig), "node-3")))), e.console.String())
	assert.Equal(t, "node-3\n", e.read("/etc/hostname"))
	assert.Equal(t, uint64(3), e.journal().Enrollment.Generation)
	assert.Equal(t, uint64(3), e.journal().Enrollment.Change.Generation)
	assert.Contains(t, e.console.String(), "generation 3, signed by "+sig.pub.ID())

	// An older stick, still validly signed: refused, for each generation
	// at or below 3.
	for _, gen := range []int{2, 3} {
		e.setBootID(fmt.Sprintf("4444444%d-4444-4444-4444-444444444444", gen))
		e.console.Reset()
		e.resetCommands()
		require.NoError(t, e.runWithProviders(sig.stick(withGen(gen, hostnamed(sig.trusting(fullConfig), "node-old")))))
		assert.Contains(t, e.console.String(), fmt.Sprintf("it is replayed: its generation is %d and this node already applied generation 3; a change needs generation: 4 or higher", gen))
		assert.Contains(t, stepResults(e.lastBoot()), "config change=refused")
		assert.Equal(t, "node-3\n", e.read("/etc/hostname"))
		assert.Empty(t, e.commands())
	}
}

// A key a signed change removes never verifies again: neither a config it
// signs nor a config that trusts it again is taken.
func TestRemovedKeyNeverVerifiesAgain(t *testing.T) {
	a, b := newSigner(t), newSigner(t)
	both := map[*signer][]machineconfig.KeyPurpose{a: nil, b: nil}
	e := enrolled(t, trustingFor(fullConfig, both, a, b))

	onlyA := withGen(1, hostnamed(trustingFor(fullConfig, both, a), "node-2"))
	require.NoError(t, e.runWithProviders(a.stick(onlyA)), e.console.String())
	assert.Equal(t, "node-2\n", e.read("/etc/hostname"))
	assert.Contains(t, e.console.String(), "removes trusted keys "+b.pub.ID()+": they never verify anything on this node again")
	assert.Equal(t, []string{b.pub.String()}, e.journal().Enrollment.RevokedKeys)

	tests := []struct {
		name   string
		stick  string
		signer *signer
		want   string
	}{
		{"signed by the removed key", withGen(2, hostnamed(trustingFor(fullConfig, both, a), "node-b")), b,
			"signed by key " + b.pub.ID()},
		{"trusting the removed key again", withGen(2, hostnamed(trustingFor(fullConfig, both, a, b), "node-b")), a,
			"it trusts key " + b.pub.ID() + ", which a signed change removed from this node: a removed key never verifies again"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.setBootID(fmt.Sprintf("5555555%d-5555-5555-5555-555555555555", i))
			e.console.Reset()
			require.NoError(t, e.runWithProviders(tt.signer.stick(tt.stick)))
			assert.Contains(t, e.console.String(), "REFUSED")
			assert.Contains(t, e.console.String(), tt.want)
			assert.Equal(t, "node-2\n", e.read("/etc/hostname"))
		})
	}
}

// A key trusted for bundles or upgrades only does not sign configs, and
// a key trusted for configs only does not sign upgrades.
func TestKeyPurposes(t *testing.T) {
	cfgKey, bundleKey := newSigner(t), newSigner(t)
	keys := map[*signer][]machineconfig.KeyPurpose{cfgKey: nil, bundleKey: {machineconfig.PurposeBundle, machineconfig.PurposeUpgrade}}
	base := trustingFor(fullConfig, keys, cfgKey, bundleKey)
	e := enrolled(t, base)

	require.NoError(t, e.runWithProviders(bundleKey.stick(withGen(1, hostnamed(base, "node-2")))))
	assert.Contains(t, e.console.String(), "REFUSED")
	assert.Contains(t, e.console.String(), "this node trusts that key for bundle, upgrade only, not to sign configs")
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"))

	r, err := newRunner(e.optionsWith(noStick()))
	require.NoError(t, err)
	cfg, err := machineconfig.Parse("machine.yaml", []byte(base))
	require.NoError(t, err)
	assert.Equal(t, []string{bundleKey.pub.String()}, keyStrings(r.upgradeKeys(cfg)), "the config key is not an upgrade key")
}

// A config key refused for an upgrade: an upgrade stick signed by a key
// the config trusts for configs only is refused before anything is
// written.
func TestConfigKeyRefusedForUpgrade(t *testing.T) {
	cfgKey := newSigner(t)
	e := enrolled(t, cfgKey.trusting(fullConfig))
	inst := &fakeInstaller{}
	o := e.optionsWith(noStick())
	o.Install = inst.install
	e.upgradeStick(cfgKey.key, "/stick", "1.3.0")
	e.media.insert(layout.LabelUpgradeFAT, "/dev/sdc1", "/stick")
	e.runWatching(t, o, stepsSay(e, "upgrade=refused"))
	assert.Empty(t, inst.calls())
	assert.Contains(t, e.console.String(), "upgrade refused, nothing was written")
	assert.Contains(t, e.console.String(), "signed by key "+cfgKey.pub.ID())
}

func keyStrings[K fmt.Stringer](keys []K) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return out
}

// A change's commit is a few durable writes; a power cut can land after
// any of them (each is atomic, so a cut during one leaves the state before
// or after it). Every prefix boots, to the old config or the new one, and
// leaves no pending change behind.
func TestChangeCommitCutAtEveryWrite(t *testing.T) {
	sig := newSigner(t)
	base := sig.trusting(fullConfig)
	changed := withGen(1, hostnamed(base, "node-2"))
	newCfg, err := machineconfig.Parse("machine.yaml", []byte(changed))
	require.NoError(t, err)

	probe := newEnv(t)
	pr, err := newRunner(probe.optionsWith(noStick()))
	require.NoError(t, err)
	n := len(pr.commitWrites(&change{cfg: newCfg}))
	require.Equal(t, 3, n, "the commit's writes changed: check this test still covers them all")

	for cut := 0; cut <= n; cut++ {
		t.Run(fmt.Sprintf("cut after %d writes", cut), func(t *testing.T) {
			e := enrolled(t, base)
			old := e.journal().Enrollment.Digest
			r, err := newRunner(e.optionsWith(noStick()))
			require.NoError(t, err)
			for _, w := range r.commitWrites(&change{cfg: newCfg, from: configFrom, signer: sig.pub.ID()})[:cut] {
				require.NoError(t, w.write(), w.name)
			}

			// The next boot, with no stick.
			e.setBootID("66666666-6666-6666-6666-666666666666")
			e.console.Reset()
			require.NoError(t, e.runWithProviders(noStick()), e.console.String())
			j := e.journal()
			require.NotNil(t, j.Enrollment)
			assert.Nil(t, j.Enrollment.Pending, "no pending change is left behind")
			if cut >= 2 { // the new config was stored
				assert.Equal(t, newCfg.Digest(), j.Enrollment.Digest)
				assert.Equal(t, uint64(1), j.Enrollment.Generation)
				assert.Equal(t, "node-2\n", e.read("/etc/hostname"))
			} else {
				assert.Equal(t, old, j.Enrollment.Digest)
				assert.Zero(t, j.Enrollment.Generation)
				assert.Equal(t, "node-1\n", e.read("/etc/hostname"))
			}
			assert.NotEqual(t, status.StateFailed, e.status().State, e.console.String())
			switch cut {
			case 1:
				assert.Contains(t, e.console.String(), "a config change was cut short before its config was stored")
			case 2:
				assert.Contains(t, e.console.String(), "its commit is finished")
			}
		})
	}
}
