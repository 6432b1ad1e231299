package registryphase

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
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
	assert.Equal(t, []string{"systemctl try-restart terrarium-registry.service"}, rec.take())
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
	assert.Equal(t, []string{"systemctl try-restart terrarium-registry.service"}, rec.take())
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
