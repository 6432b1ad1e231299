package kubeconfig

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
	"github.com/terrarium-os/terrarium/pkg/testvm/testpki"
)

var now = time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)

var shared = sync.OnceValues(func() (*clustersecrets.Secrets, error) {
	return clustersecrets.Generate("lab", now.Add(-time.Hour), 24*time.Hour, rand.Reader)
})

func secrets(t *testing.T) *clustersecrets.Secrets {
	t.Helper()
	s, err := shared()
	require.NoError(t, err)
	c := *s
	return &c
}

func mustPEM(t *testing.T, s string) []byte {
	t.Helper()
	b, _ := pem.Decode([]byte(s))
	require.NotNil(t, b)
	return b.Bytes
}

// apiServer is a TLS server that, like kube-apiserver, asks for a client
// certificate from the cluster CA and says who it is.
func apiServer(t *testing.T, s *clustersecrets.Secrets) (*httptest.Server, chan *x509.Certificate) {
	t.Helper()
	return apiServerAt(t, s, nil)
}

// apiServerAt is apiServer with its clock (nil: the host's): the time
// against which it checks client certificates.
func apiServerAt(t *testing.T, s *clustersecrets.Secrets, clock func() time.Time) (*httptest.Server, chan *x509.Certificate) {
	t.Helper()
	ca, err := x509.ParseCertificate(mustPEM(t, s.CA.Cert))
	require.NoError(t, err)
	caKey, err := x509.ParseECPrivateKey(mustPEM(t, s.CA.Key))
	require.NoError(t, err)
	certPEM, keyPEM := testpki.CA{Cert: ca, Key: caKey}.Issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	serving, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	seen := make(chan *x509.Certificate, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.TLS.PeerCertificates[0]
		_, _ = w.Write([]byte(`{"items":[{"metadata":{"name":"cp-1"}}]}`))
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool,
		Time: clock,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, seen
}

// The minted kubeconfig reaches an API server that checks client
// certificates against the cluster CA, as a cluster admin, and checks the
// server by the cluster CA in turn.
func TestAdmin(t *testing.T) {
	s := secrets(t)
	srv, seen := apiServer(t, s)
	m, err := Admin(s, Options{Server: srv.URL, User: DefaultUser, TTL: DefaultTTL, Now: time.Now()})
	require.NoError(t, err)

	c, err := kubeclient.New(m.Data, nil)
	require.NoError(t, err)
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	assert.Equal(t, "cp-1", nodes[0].Name)

	cert := <-seen
	assert.Equal(t, DefaultUser, cert.Subject.CommonName)
	assert.Equal(t, []string{AdminsGroup}, cert.Subject.Organization)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
	assert.WithinDuration(t, time.Now().Add(DefaultTTL), cert.NotAfter, time.Minute)
	assert.Equal(t, m.NotAfter.Unix(), cert.NotAfter.Unix())

	var doc file
	require.NoError(t, yaml.Unmarshal(m.Data, &doc))
	assert.Equal(t, "terrarium-operator@lab", doc.CurrentContext)
	assert.Equal(t, "lab", doc.Clusters[0].Name)
	assert.Contains(t, string(m.Data), "# Cluster admin \"terrarium-operator\" of cluster \"lab\", valid until ")
}

// An API server whose clock is at the cluster CA's issue time (its
// control plane had a flat battery and stepped to the latest time it knew
// to have passed) accepts a kubeconfig minted now: the certificate is
// valid from the CA's NotBefore, not from a little before now.
func TestAdminWorksOnAClusterBehindTheOperator(t *testing.T) {
	s := secrets(t)
	ca, err := x509.ParseCertificate(mustPEM(t, s.CA.Cert))
	require.NoError(t, err)
	srv, seen := apiServerAt(t, s, func() time.Time { return ca.NotBefore.Add(time.Minute) })
	m, err := Admin(s, Options{Server: srv.URL, User: DefaultUser, TTL: DefaultTTL, Now: time.Now()})
	require.NoError(t, err)
	c, err := kubeclient.New(m.Data, nil)
	require.NoError(t, err)
	_, err = c.Nodes(context.Background())
	require.NoError(t, err, "a server an hour or more behind the operator refused the certificate")
	cert := <-seen
	assert.Equal(t, ca.NotBefore, cert.NotBefore)
}

// A kubeconfig from other secrets is refused by the server: the client
// certificate is what grants access.
func TestAdminOtherCluster(t *testing.T) {
	srv, _ := apiServer(t, secrets(t))
	other, err := clustersecrets.Generate("other", now, time.Hour, rand.Reader)
	require.NoError(t, err)
	m, err := Admin(other, Options{Server: srv.URL, User: DefaultUser, TTL: time.Hour, Now: time.Now()})
	require.NoError(t, err)
	c, err := kubeclient.New(m.Data, nil)
	require.NoError(t, err)
	_, err = c.Nodes(context.Background())
	assert.Error(t, err, "neither side trusts the other")
}

func TestAdminLifetime(t *testing.T) {
	s := secrets(t)
	ca, err := x509.ParseCertificate(mustPEM(t, s.CA.Cert))
	require.NoError(t, err)
	m, err := Admin(s, Options{Server: "https://10.77.0.10:6443", User: "ops", TTL: 100 * 365 * 24 * time.Hour, Now: now})
	require.NoError(t, err)
	assert.Equal(t, ca.NotAfter, m.NotAfter, "never past the CA")

	m, err = Admin(s, Options{Server: "https://10.77.0.10:6443", User: "ops", TTL: 90 * time.Minute, Now: now})
	require.NoError(t, err)
	assert.Equal(t, now.Add(90*time.Minute), m.NotAfter)
}

func TestAdminRefuses(t *testing.T) {
	s := secrets(t)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"plain http", Options{Server: "http://10.77.0.10:6443", User: "ops", TTL: time.Hour, Now: now}, "give the API server as https://HOST:PORT"},
		{"no host", Options{Server: "10.77.0.10:6443", User: "ops", TTL: time.Hour, Now: now}, "give the API server as https://HOST:PORT"},
		{"a path", Options{Server: "https://10.77.0.10:6443/api", User: "ops", TTL: time.Hour, Now: now}, "give the API server as https://HOST:PORT"},
		{"no lifetime", Options{Server: "https://10.77.0.10:6443", User: "ops", Now: now}, "give a positive lifetime"},
		{"no user", Options{Server: "https://10.77.0.10:6443", TTL: time.Hour, Now: now}, "no user name"},
		{"CA expired", Options{Server: "https://10.77.0.10:6443", User: "ops", TTL: time.Hour, Now: now.AddDate(20, 0, 0)}, "the cluster CA expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Admin(s, tc.o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Through a tunnel the server's address is not the one its certificate
// names: tls-server-name says which name to check it for.
func TestAdminThroughTunnel(t *testing.T) {
	s := secrets(t)
	srv, seen := apiServer(t, s)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	m, err := Admin(s, Options{Server: "https://localhost:" + port, User: "ops", TTL: time.Hour, Now: time.Now()})
	require.NoError(t, err)

	c, err := kubeclient.New(m.Data, nil)
	require.NoError(t, err)
	_, err = c.Nodes(context.Background())
	require.Error(t, err, "the certificate does not name localhost")
	assert.Contains(t, err.Error(), "certificate")

	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(m.Data, &doc))
	doc["clusters"].([]any)[0].(map[string]any)["cluster"].(map[string]any)["tls-server-name"] = "127.0.0.1"
	tunneled, err := yaml.Marshal(doc)
	require.NoError(t, err)
	c, err = kubeclient.New(tunneled, nil)
	require.NoError(t, err)
	_, err = c.Nodes(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "ops", (<-seen).Subject.CommonName)
}
