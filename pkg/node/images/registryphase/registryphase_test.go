package registryphase

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/node/images/registryd"
	"github.com/terrarium-os/terrarium/pkg/testvm/testpki"
)

// recorder is a host whose programs only get recorded.
type recorder struct {
	mu   sync.Mutex
	cmds []string
}

func (r *recorder) Exec(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, strings.Join(append([]string{name}, args...), " "))
	return nil, nil
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cmds
	r.cmds = nil
	return c
}

// testCA is a cluster CA: its certificate and key in PEM.
func testCA(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	ca := testpki.NewCA(t, "kubernetes")
	return ca.CertPEM, ca.KeyPEM
}

// A control plane serving its images with no certificate in its config
// gets one from the cluster CA for its listen address; peers become
// mirrors; a second apply changes nothing and restarts nothing.
func TestControlPlaneIssuesItsCertificate(t *testing.T) {
	caCert, caKey := testCA(t)
	c := &machineconfig.Config{
		Hostname: "cp-1",
		Registry: &machineconfig.Registry{Serve: true, Listen: "10.77.0.10:5000", Peers: []string{"10.77.0.11:5000"}, CA: caCert},
		Cluster:  &machineconfig.Cluster{CACert: caCert, PKI: &machineconfig.ClusterPKI{CAKey: caKey}},
	}
	rec := &recorder{}
	h := &host.Host{Root: t.TempDir(), Executor: rec, Clock: host.ClockFunc(time.Now)}
	p := Phase(h)
	assert.Equal(t, "registry-mirrors", p.Name)
	require.Error(t, p.Verify(context.Background(), c), "nothing written yet")

	require.NoError(t, p.Apply(context.Background(), c))
	assert.Equal(t, []string{"systemctl restart terrarium-registry.service"}, rec.take())
	require.NoError(t, p.Verify(context.Background(), c))

	ca, err := x509CA(c)
	require.NoError(t, err)
	require.NoError(t, registryCertFits(h, registryPKIDir+"/registry.pem", registryPKIDir+"/registry-key.pem", ca, netip.MustParseAddr("10.77.0.10")))
	fi, err := os.Stat(h.Path(registryPKIDir + "/registry-key.pem"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the key is private")
	rc, err := os.ReadFile(h.Path(layout.RegistryConfigFile))
	require.NoError(t, err)
	assert.Contains(t, string(rc), `"10.77.0.11:5000"`)
	hosts, err := filepath.Glob(h.Path(filepath.Join(certsDir, "*", "hosts.toml")))
	require.NoError(t, err)
	assert.NotEmpty(t, hosts)

	require.NoError(t, p.Apply(context.Background(), c))
	assert.Empty(t, rec.take(), "an unchanged registry is not restarted")

	// A certificate signed by another CA (a CA rotated by re-enrollment)
	// no longer fits: verify says so, apply issues a new one.
	otherCert, otherKey := testCA(t)
	require.NoError(t, os.WriteFile(h.Path(registryPKIDir+"/registry.pem"), []byte(otherCert), 0o644))
	require.NoError(t, os.WriteFile(h.Path(registryPKIDir+"/registry-key.pem"), []byte(otherKey), 0o600))
	assert.ErrorContains(t, p.Verify(context.Background(), c), "does not fit")
	require.NoError(t, p.Apply(context.Background(), c))
	assert.Equal(t, []string{"systemctl restart terrarium-registry.service"}, rec.take())
	require.NoError(t, p.Verify(context.Background(), c))
}

// A node given its certificate in the config writes it as given.
func TestGivenCertificateIsWritten(t *testing.T) {
	c := &machineconfig.Config{Registry: &machineconfig.Registry{Serve: true, Listen: "10.0.0.5:5000", Certificate: "CERT\n", Key: "KEY\n"}}
	files, modes, err := registryFiles(c)
	require.NoError(t, err)
	assert.Equal(t, "CERT\n", files[registryPKIDir+"/registry.pem"])
	assert.Equal(t, "KEY\n", files[registryPKIDir+"/registry-key.pem"])
	assert.Equal(t, os.FileMode(0o600), modes[registryPKIDir+"/registry-key.pem"])
	assert.False(t, issuesRegistryCert(c))
}

// What a node shows its peers: the config's client certificate (key
// 0600), else on a cluster node the kubelet's; a node with neither shows
// nothing. containerd's hosts.toml names loopback alone either way.
func TestClientCertificate(t *testing.T) {
	for _, tc := range []struct {
		name              string
		c                 *machineconfig.Config
		wantCert, wantKey string
	}{
		{"given", &machineconfig.Config{Registry: &machineconfig.Registry{Peers: []string{"10.0.0.5:5443"}, CA: "CA\n", ClientCertificate: "CLIENT\n", ClientKey: "CLIENTKEY\n"}},
			registryPKIDir + "/registry-client.pem", registryPKIDir + "/registry-client-key.pem"},
		{"a cluster node's kubelet's", &machineconfig.Config{Registry: &machineconfig.Registry{Peers: []string{"10.0.0.5:5443"}, CA: "CA\n"}, Cluster: &machineconfig.Cluster{}},
			layout.KubeletClientCert, layout.KubeletClientCert},
		{"none", &machineconfig.Config{Registry: &machineconfig.Registry{Peers: []string{"10.0.0.5:5443"}, CA: "CA\n"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, modes, err := registryFiles(tc.c)
			require.NoError(t, err)
			var rc registryd.Config
			require.NoError(t, json.Unmarshal([]byte(files[layout.RegistryConfigFile]), &rc))
			assert.Equal(t, tc.wantCert, rc.ClientCertFile)
			assert.Equal(t, tc.wantKey, rc.ClientKeyFile)
			if tc.c.Registry.ClientKey != "" {
				assert.Equal(t, "CLIENTKEY\n", files[rc.ClientKeyFile])
				assert.Equal(t, os.FileMode(0o600), modes[rc.ClientKeyFile])
			}
			for p, content := range files {
				if strings.HasSuffix(p, "hosts.toml") {
					assert.NotContains(t, content, "10.0.0.5", "%s: containerd never talks to a peer itself", p)
				}
			}
		})
	}
}

// The registry gets the side-load policy from the config: a node that
// trusts any key (for any purpose) requires signed bundles, by the keys it
// trusts for bundles (and, with the legacy signedBundlesOnly, its bare
// keys); and the reserve it keeps on STATE.
func TestSideloadPolicy(t *testing.T) {
	const (
		k1 = "ed25519:7Dk7PWAuF2dvs+89QQwuY0TXKmWrdbzHt3t6JOqD4tE="
		k2 = "ed25519:Ls0m7fU3V1rCIVDyv6mW6gqfJ8tVfB7q4bq0gRM7lno="
	)
	for _, tc := range []struct {
		name        string
		keys        []machineconfig.TrustedKey
		signedOnly  bool
		reserveMiB  uint64
		wantRequire bool
		wantKeys    []string
		wantReserve uint64
	}{
		{name: "no key: unsigned bundles taken", wantReserve: machineconfig.DefaultStateReserveMiB << 20},
		{name: "a key for configs only: signed bundles required, no key signs them",
			keys: []machineconfig.TrustedKey{{Key: k1}}, wantRequire: true, wantReserve: 1 << 30},
		{name: "a key for bundles",
			keys:        []machineconfig.TrustedKey{{Key: k1}, {Key: k2, Purposes: []machineconfig.KeyPurpose{machineconfig.PurposeConfig, machineconfig.PurposeBundle}}},
			wantRequire: true, wantKeys: []string{k2}, wantReserve: 1 << 30},
		{name: "signedBundlesOnly: bare keys sign bundles too", keys: []machineconfig.TrustedKey{{Key: k1}}, signedOnly: true,
			wantRequire: true, wantKeys: []string{k1}, wantReserve: 1 << 30},
		{name: "a reserve of its own", reserveMiB: 2048, wantReserve: 2 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &machineconfig.Config{TrustedKeys: tc.keys, Registry: &machineconfig.Registry{SignedBundlesOnly: tc.signedOnly}}
			if tc.reserveMiB != 0 {
				c.State = &machineconfig.State{ReserveMiB: tc.reserveMiB}
			}
			files, _, err := registryFiles(c)
			require.NoError(t, err)
			raw := files[layout.RegistryConfigFile]
			assert.Contains(t, raw, `"requireSignedBundles": `, "always written: a file without it is an older firstboot's")
			var rc registryd.Config
			require.NoError(t, json.Unmarshal([]byte(raw), &rc))
			assert.Equal(t, tc.wantRequire, rc.RequireSignedBundles)
			assert.Equal(t, tc.wantKeys, rc.BundleKeys)
			assert.Equal(t, tc.wantReserve, rc.StateReserveBytes)
		})
	}
}
