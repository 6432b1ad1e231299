package firstboot

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/nodephases"
	"github.com/terrarium-os/terrarium/pkg/node/status"
)

// signer is a key a test node trusts (or not).
type signer struct {
	key ed25519.PrivateKey
	pub signature.PublicKey
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	return &signer{key: key, pub: pub}
}

// trusting adds the signer's key to a config's trustedKeys.
func (s *signer) trusting(config string) string {
	return config + "trustedKeys:\n  - " + s.pub.String() + "\n"
}

// withGen sets a config's generation.
func withGen(n int, config string) string {
	return strings.Replace(config, "kind: MachineConfig\n", fmt.Sprintf("kind: MachineConfig\ngeneration: %d\n", n), 1)
}

// stick is a config medium holding config and, if not nil, sig.
func stick(config string, sig []byte) configsource.Provider {
	return configsource.Func{N: "test-stick", F: func(ctx context.Context) (*configsource.Found, error) {
		return &configsource.Found{Config: []byte(config), Signature: sig, Source: configFrom}, nil
	}}
}

func (s *signer) stick(config string) configsource.Provider {
	return stick(config, signature.Sign(s.key, []byte(config)))
}

// noStick is a node with no config medium attached.
func noStick() configsource.Provider {
	return configsource.Func{N: "test-stick", F: func(ctx context.Context) (*configsource.Found, error) {
		return nil, fmt.Errorf("no stick: %w", configsource.ErrAbsent)
	}}
}

// enrolled is a node provisioned from config, booted into a second boot.
func enrolled(t *testing.T, config string) *env {
	t.Helper()
	e := newEnv(t)
	require.NoError(t, e.run(config), e.console.String())
	e.resetCommands()
	e.console.Reset()
	e.setBootID("22222222-2222-2222-2222-222222222222")
	return e
}

func TestEnrollsThenBootsWithoutStick(t *testing.T) {
	e := enrolled(t, fullConfig)
	j := e.journal()
	require.NotNil(t, j.Enrollment)
	assert.Equal(t, configFrom, j.Enrollment.Source)
	assert.False(t, j.Enrollment.At.IsZero())
	fi, err := os.Stat(e.path(layout.StateMount + "/" + layout.StateNodeConfig))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the stored config may carry keys")

	require.NoError(t, e.runWithProviders(noStick()))
	rec := e.lastBoot()
	assert.Equal(t, "verify", rec.Mode)
	s := e.status()
	assert.Equal(t, status.StateVerified, s.State)
	assert.Equal(t, "node-1", s.Hostname)
	assert.Contains(t, s.Enrolled, "from "+configFrom+" at 2025-06-01T")
	assert.Contains(t, e.console.String(), "│ enrolled   from "+configFrom)
	assert.Empty(t, e.commands(), "a verified node changes nothing")
}

func TestStoredConfigTamperedIsReported(t *testing.T) {
	e := enrolled(t, fullConfig)
	require.NoError(t, os.WriteFile(e.path(layout.StateMount+"/"+layout.StateNodeConfig), []byte(minimalConfig), 0o600))
	err := e.runWithProviders(stick(minimalConfig, nil))
	require.ErrorIs(t, err, errStoredConfig)
	assert.Contains(t, err.Error(), "firstboot reset")
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"), "nothing applied")
}

func TestUnsignedChangeRefused(t *testing.T) {
	sig := newSigner(t)
	e := enrolled(t, sig.trusting(fullConfig))
	changed := withGen(1, sig.trusting(strings.Replace(fullConfig, "hostname: node-1", "hostname: intruder", 1)))

	require.NoError(t, e.runWithProviders(stick(changed, nil)))
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"))
	assert.Equal(t, "verify", e.lastBoot().Mode)
	assert.Contains(t, stepResults(e.lastBoot()), "config change=refused")
	assert.Contains(t, e.console.String(), "REFUSED: nothing changed")
	assert.Contains(t, e.console.String(), "it is not signed")
	assert.Contains(t, e.status().Message, "refused")
	assert.NotContains(t, e.commands(), "hostname intruder")
}

func TestSignedChangeRefusals(t *testing.T) {
	trusted, stranger := newSigner(t), newSigner(t)
	base := trusted.trusting(fullConfig)
	changed := withGen(1, trusted.trusting(strings.Replace(fullConfig, "hostname: node-1", "hostname: node-2", 1)))
	good := signature.Sign(trusted.key, []byte(changed))
	for _, tc := range []struct {
		name string
		sig  []byte
		want error
	}{
		{"wrong key", signature.Sign(stranger.key, []byte(changed)), signature.ErrUnknownKey},
		{"truncated", good[:len(good)/2], signature.ErrMalformed},
		{"over another file", signature.Sign(trusted.key, []byte(base)), signature.ErrBadSignature},
		{"garbage", []byte("hello\n"), signature.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enrolled(t, base)
			require.NoError(t, e.runWithProviders(stick(changed, tc.sig)))
			assert.Equal(t, "node-1\n", e.read("/etc/hostname"), "nothing changed")
			assert.Contains(t, e.console.String(), "REFUSED")
			assert.Contains(t, e.console.String(), tc.want.Error())
			assert.Empty(t, e.commands())
			j := e.journal()
			assert.Equal(t, e.journal().Provisioned.ConfigDigest, j.Enrollment.Digest)
		})
	}
}

func TestSignedChangeApplied(t *testing.T) {
	sig := newSigner(t)
	e := enrolled(t, sig.trusting(fullConfig))
	before := e.journal().Enrollment.Digest
	// A new hostname and a new admin in place of the old one.
	changed := withGen(1, sig.trusting(strings.NewReplacer("hostname: node-1", "hostname: node-2", "name: ops", "name: bob").Replace(fullConfig)))

	require.NoError(t, e.runWithProviders(sig.stick(changed)), e.console.String())
	assert.Equal(t, "node-2\n", e.read("/etc/hostname"))
	assert.Equal(t, "bob ALL=(ALL) NOPASSWD:ALL\n", e.read(nodephases.AdminSudoers))
	cmds := e.commands()
	assert.Contains(t, cmds, "userdel --force --remove ops", "the removed admin is gone")
	assert.Contains(t, cmds, "hostname node-2")
	assert.True(t, slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "useradd") && strings.HasSuffix(c, " bob") }))
	assert.NotContains(t, cmds, "networkctl reload", "the network did not change")
	for _, c := range cmds {
		assert.NotContains(t, c, "restart", "no unit restarts for a hostname and an admin")
	}
	j := e.journal()
	assert.NotEqual(t, before, j.Enrollment.Digest)
	require.NotNil(t, j.Enrollment.Change)
	assert.Equal(t, sig.pub.ID(), j.Enrollment.Change.SignedBy)
	assert.Equal(t, "change", e.lastBoot().Mode)
	assert.Equal(t, status.StateChanged, e.status().State)

	// The same stick again, next boot: nothing to do.
	e.resetCommands()
	e.setBootID("33333333-3333-3333-3333-333333333333")
	require.NoError(t, e.runWithProviders(sig.stick(changed)))
	assert.Equal(t, "verify", e.lastBoot().Mode)
	assert.NotContains(t, stepResults(e.lastBoot()), "config change=refused")
	assert.Empty(t, e.commands())

	// And without it: the changed config is the stored one.
	e.setBootID("44444444-4444-4444-4444-444444444444")
	require.NoError(t, e.runWithProviders(noStick()))
	assert.Equal(t, status.StateVerified, e.status().State)
	assert.Equal(t, "node-2", e.status().Hostname)
}

func TestChangeWithoutTrustedKeysRefused(t *testing.T) {
	sig := newSigner(t)
	e := enrolled(t, fullConfig) // trusts no key
	changed := withGen(1, strings.Replace(fullConfig, "hostname: node-1", "hostname: node-2", 1))
	require.NoError(t, e.runWithProviders(sig.stick(changed)))
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"))
	assert.Contains(t, e.console.String(), signature.ErrUnknownKey.Error())
}

func TestFailedChangeIsUndone(t *testing.T) {
	sig := newSigner(t)
	e := enrolled(t, sig.trusting(fullConfig))
	changed := withGen(1, sig.trusting(strings.NewReplacer("hostname: node-1", "hostname: node-2", "name: ops", "name: bob").Replace(fullConfig)))
	e.failCmd["useradd"] = errFake

	require.NoError(t, e.runWithProviders(sig.stick(changed)))
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"), "the hostname change was undone")
	assert.Contains(t, e.console.String(), "FAILED")
	assert.Contains(t, e.console.String(), "the enrolled config is in place again")
	assert.Contains(t, e.status().Message, "failed and was undone")
	assert.Equal(t, status.StateVerified, e.status().State)
	stored, err := machineconfig.Parse("stored", []byte(e.read(layout.StateMount+"/"+layout.StateNodeConfig)))
	require.NoError(t, err)
	assert.Equal(t, "node-1", stored.Hostname, "the change was not stored")
}

func TestAdminNameTakenIsInvalid(t *testing.T) {
	for _, tc := range []struct{ name, file, content string }{
		{"a user of the image", "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nops:x:100:100::/nonexistent:/usr/sbin/nologin\n"},
		{"a group of the image", "/etc/group", "root:x:0:\nops:x:27:\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(tc.file, tc.content)
			err := e.runUntil(e.optionsWith(stick(fullConfig, nil)), inState(status.StateConfigInvalid))
			require.ErrorIs(t, err, context.Canceled, "waits for a config it can apply")
			s := e.status()
			assert.Equal(t, status.StateConfigInvalid, s.State)
			assert.Contains(t, s.Message, `admin.name: "ops" is already an account or group of this image (`+tc.file+`)`)
			assert.Contains(t, s.Message, "choose another name")
			assert.False(t, e.exists("/etc/hostname"), "nothing applied")
			assert.Empty(t, e.commands())
			assert.Nil(t, e.journal().Enrollment, "not enrolled")
		})
	}
}

// A link named the kernel's way on a slot that names links predictably
// matches nothing: invalid, nothing applied; the same config on a slot
// booted with net.ifnames=0 enrolls.
func TestKernelLinkNameIsInvalidOnPredictableSlot(t *testing.T) {
	cfg := strings.Replace(fullConfig, "- name: enp0s2", "- name: eth0", 1)
	require.NotEqual(t, fullConfig, cfg)
	e := newEnv(t)
	require.ErrorIs(t, e.runUntil(e.optionsWith(stick(cfg, nil)), inState(status.StateConfigInvalid)), context.Canceled, "waits for a config it can apply")
	s := e.status()
	assert.Equal(t, status.StateConfigInvalid, s.State)
	assert.Contains(t, s.Message, `$.network.interfaces[0].name: "eth0" is a kernel link name`)
	assert.Contains(t, s.Message, "macAddress")
	assert.False(t, e.exists("/etc/hostname"), "nothing applied")
	assert.Empty(t, e.commands())

	e = newEnv(t)
	e.write("/proc/cmdline", "root=PARTLABEL=TERRA-A ro terrarium.slot=a net.ifnames=0\n")
	require.NoError(t, e.runWithProviders(stick(cfg, nil)))
	assert.Contains(t, e.read("/etc/systemd/network/10-terrarium-0.network"), "Name=eth0\n")
}

func TestPasswdUnreadableIsInvalid(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, os.Remove(e.path("/etc/passwd")))
	e.mkdir("/etc/passwd")
	require.ErrorIs(t, e.runUntil(e.optionsWith(stick(fullConfig, nil)), inState(status.StateConfigInvalid)), context.Canceled)
	assert.Contains(t, e.status().Message, "admin.name: cannot check")
	assert.Empty(t, e.commands())
}

func TestImmutableFieldsRefused(t *testing.T) {
	worker := clusterConfig(t, "w-1")
	parse := func(t *testing.T, s string) *machineconfig.Config {
		t.Helper()
		c, err := machineconfig.Parse("machine.yaml", []byte(s))
		require.NoError(t, err)
		return c
	}
	old := parse(t, worker)
	// The configs are edited after Parse: a node config that changes its
	// role or address consistently (pki, controlPlanes, addresses) is
	// still the same refusal.
	for _, tc := range []struct {
		name, want string
		edit       func(c *machineconfig.Config)
	}{
		{"role", "cluster.role", func(c *machineconfig.Config) { c.Cluster.Role = machineconfig.RoleControlPlane }},
		{"cluster", "cluster.name", func(c *machineconfig.Config) { c.Cluster.Name = "other" }},
		{"node IP", "cluster.nodeIP", func(c *machineconfig.Config) { c.Cluster.NodeIP = "10.77.0.21" }},
		{"CA", "cluster.caCert", func(c *machineconfig.Config) { c.Cluster.CACertHash += "0" }},
		{"name", "hostname", func(c *machineconfig.Config) { c.Hostname = "w-9" }},
		{"secrets encryption key", "cluster.secretsEncryptionKey: a key for a control plane formed without one", func(c *machineconfig.Config) {
			c.Cluster.SecretsEncryptionKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := parse(t, worker)
			tc.edit(n)
			err := immutableChanges(old, n)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "firstboot reset")
			assert.NotContains(t, err.Error(), "MDEyMzQ1Njc4", "the key is quoted")
		})
	}
	t.Run("secrets encryption keys", func(t *testing.T) {
		cpText := clusterConfig(t, "cp-1")
		cp := parse(t, cpText)
		cur := cp.Cluster.SecretsEncryptionKey
		require.NotEmpty(t, cur)
		const next, third = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXowMTIzNDU="
		rotated := parse(t, cpText)
		rotated.Cluster.SecretsEncryptionKey, rotated.Cluster.RetiredSecretsEncryptionKeys = next, []string{cur}
		assert.NoError(t, immutableChanges(cp, rotated), "a rotation keeps the old key as retired")
		again := parse(t, cpText)
		again.Cluster.SecretsEncryptionKey, again.Cluster.RetiredSecretsEncryptionKeys = third, []string{next, cur}
		assert.NoError(t, immutableChanges(rotated, again), "a second rotation")

		for name, tc := range map[string]struct {
			old  *machineconfig.Config
			edit func(c *machineconfig.Config)
			want string
		}{
			"new key, old one dropped": {cp, func(c *machineconfig.Config) { c.Cluster.SecretsEncryptionKey = next },
				"cluster.secretsEncryptionKey: a new key that does not keep the current one as retired"},
			"retired key dropped": {again, func(c *machineconfig.Config) {
				c.Cluster.SecretsEncryptionKey, c.Cluster.RetiredSecretsEncryptionKeys = third, []string{next}
			}, "cluster.retiredSecretsEncryptionKeys[1]: dropped; retired keys are kept for good"},
		} {
			n := parse(t, cpText)
			tc.edit(n)
			err := immutableChanges(tc.old, n)
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), tc.want, name)
			for _, k := range []string{cur, next, third} {
				assert.NotContains(t, err.Error(), k, "%s: a key is quoted", name)
			}
		}
	})
	t.Run("a new token is not a new node", func(t *testing.T) {
		n := parse(t, worker)
		n.Cluster.Token = "abcdef.0123456789abcdef"
		assert.NoError(t, immutableChanges(old, n))
	})
	t.Run("joining or leaving a cluster", func(t *testing.T) {
		standalone := parse(t, fullConfig)
		assert.ErrorContains(t, immutableChanges(standalone, old), "cannot join")
		assert.ErrorContains(t, immutableChanges(old, standalone), "cannot leave")
	})
}

func TestSignedRoleChangeRefused(t *testing.T) {
	sig := newSigner(t)
	e := enrolled(t, sig.trusting(fullConfig))
	// A standalone node made a cluster's worker by a signed stick.
	worker := regexp.MustCompile(`ed25519:[A-Za-z0-9+/=]+`).ReplaceAllString(clusterConfig(t, "w-1"), sig.pub.String())
	require.NoError(t, e.runWithProviders(sig.stick(worker)))
	assert.Contains(t, e.console.String(), "REFUSED")
	assert.Contains(t, e.console.String(), "cannot join a cluster")
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"))
	assert.Empty(t, e.commands())
}

// sticks is a USB port: what is plugged in can change while firstboot
// runs.
type sticks struct {
	mu  sync.Mutex
	cur configsource.Provider
}

func (s *sticks) plug(p configsource.Provider) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = p
}

func (s *sticks) provider() configsource.Provider {
	return configsource.Func{N: "port", F: func(ctx context.Context) (*configsource.Found, error) {
		s.mu.Lock()
		p := s.cur
		s.mu.Unlock()
		return p.Fetch(ctx)
	}}
}

func TestWatchAppliesChangesWhileRunning(t *testing.T) {
	sig := newSigner(t)
	base := sig.trusting(fullConfig)
	e := enrolled(t, base)
	port := &sticks{cur: noStick()}
	o := e.optionsWith(port.provider())
	o.WatchInterval = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	waitFor := func(what string, cond func(s *status.Status) bool) {
		t.Helper()
		require.Eventually(t, func() bool { s := e.statusIfAny(); return s != nil && cond(s) }, 5*time.Second, time.Millisecond, what)
	}
	waitFor("verified", func(s *status.Status) bool { return s.State == status.StateVerified })

	port.plug(stick(sig.trusting(strings.Replace(fullConfig, "hostname: node-1", "hostname: x", 1)), nil))
	waitFor("unsigned refused", func(s *status.Status) bool { return strings.Contains(s.Message, "refused") })
	assert.Equal(t, "node-1\n", e.read("/etc/hostname"))

	changed := withGen(1, sig.trusting(strings.Replace(fullConfig, "hostname: node-1", "hostname: node-2", 1)))
	port.plug(sig.stick(changed))
	waitFor("changed", func(s *status.Status) bool { return s.State == status.StateChanged })
	assert.Equal(t, "node-2\n", e.read("/etc/hostname"))
	s := e.statusIfAny()
	require.NotNil(t, s.Healthy)
	assert.True(t, *s.Healthy)

	cancel()
	require.NoError(t, <-done)
	steps := stepResults(e.lastBoot())
	assert.Equal(t, 1, strings.Count(strings.Join(steps, " "), "config change=refused"), "judged once, not at every look: %v", steps)
	assert.Contains(t, steps, "hostname=changed")
}

func TestRunPhaseAlone(t *testing.T) {
	e := enrolled(t, fullConfig)
	require.NoError(t, os.Remove(e.path("/etc/systemd/network/10-terrarium-0.network")))
	o := e.optionsWith(noStick())

	require.NoError(t, RunPhase(context.Background(), o, "network"))
	assert.Equal(t, wantStaticNetwork, e.read("/etc/systemd/network/10-terrarium-0.network"))
	assert.Equal(t, []string{"networkctl reload"}, e.commands(), "only the network phase ran")
	assert.Contains(t, stepResults(e.lastBoot()), "network=applied")

	e.resetCommands()
	require.NoError(t, RunPhase(context.Background(), o, "hostname"))
	assert.Empty(t, e.commands(), "already as desired")

	err := RunPhase(context.Background(), o, "netwrk")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hostname, network, admin-user, time, registry-mirrors")

	fresh := newEnv(t)
	assert.ErrorContains(t, RunPhase(context.Background(), fresh.optionsWith(noStick()), "network"), "not enrolled")
}

// TestClusterConfigOnImageWithoutKubernetes: a cluster config on an image
// that carries no Kubernetes bundle is invalid before anything is applied
// (it used to fail in the kubernetes phase, after hostname and network).
func TestClusterConfigOnImageWithoutKubernetes(t *testing.T) {
	e := newEnv(t) // no bundle index in the slot
	require.ErrorIs(t, e.runUntil(e.optionsWith(stick(clusterConfig(t, "w-1"), nil)), inState(status.StateConfigInvalid)), context.Canceled)
	s := e.status()
	assert.Equal(t, status.StateConfigInvalid, s.State)
	assert.Contains(t, s.Message, "cluster: ")
	assert.Contains(t, s.Message, "Kubernetes bundle")
	assert.False(t, e.exists("/etc/hostname"), "nothing applied")
	assert.Empty(t, e.commands())
}
