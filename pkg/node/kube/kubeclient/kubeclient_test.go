package kubeclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pki is a CA with a server and a client certificate, as PEM.
type pki struct {
	caPEM, serverCert, serverKey, clientCert, clientKey []byte
}

func newPKI(t *testing.T, clientCN string) pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	require.NoError(t, err)
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(serial),
			Subject: pkix.Name{CommonName: cn}, NotBefore: caTmpl.NotBefore, NotAfter: caTmpl.NotAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca, key.Public(), caKey)
		require.NoError(t, err)
		kd, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	var p pki
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.serverCert, p.serverKey = issue(2, "kube-apiserver", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue(3, clientCN, x509.ExtKeyUsageClientAuth)
	return p
}

// apiServer answers the node API like kube-apiserver, to clients with a
// certificate of the CA only, and counts its TLS connections.
func apiServer(t *testing.T, p pki, conns *atomic.Int32) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	node := func(name, ready string) string {
		return fmt.Sprintf(`{"kind":"Node","metadata":{"name":%q,"labels":{"a":"b"}},"status":{"conditions":[`+
			`{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":%q}]}}`, name, ready)
	}
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		if r.TLS.PeerCertificates[0].Subject.CommonName != "kubernetes-admin" {
			http.Error(w, `{"kind":"Status","message":"nodes is forbidden"}`, http.StatusForbidden)
			return
		}
		fmt.Fprintf(w, `{"kind":"NodeList","items":[%s,%s]}`, node("cp-1", "True"), node("w-1", "False"))
	})
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != "w-1" {
			http.Error(w, `{"kind":"Status","message":"not found"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, node("w-1", "True"))
	})
	mux.HandleFunc("DELETE /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.TLS.PeerCertificates[0].Subject.CommonName != "kubernetes-admin" {
			http.Error(w, `{"kind":"Status","message":"nodes is forbidden"}`, http.StatusForbidden)
			return
		}
		if r.PathValue("name") != "w-1" {
			http.Error(w, `{"kind":"Status","message":"not found"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"kind":"Status","status":"Success"}`)
	})
	return tlsServer(t, p, mux, conns)
}

// tlsServer serves mux over TLS with the PKI's server certificate, to
// clients with a certificate of its CA only, and counts connections.
func tlsServer(t *testing.T, p pki, mux *http.ServeMux, conns *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(mux)
	cert, err := tls.X509KeyPair(p.serverCert, p.serverKey)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew && conns != nil {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// adminConf is a kubeconfig like kubeadm's admin.conf: everything inline.
func adminConf(server string, p pki) string {
	return `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: ` + b64(p.caPEM) + `
    server: ` + server + `
  name: lab
contexts:
- context:
    cluster: lab
    user: kubernetes-admin
  name: kubernetes-admin@lab
current-context: kubernetes-admin@lab
users:
- name: kubernetes-admin
  user:
    client-certificate-data: ` + b64(p.clientCert) + `
    client-key-data: ` + b64(p.clientKey) + `
`
}

func TestAdminListsNodesOnOneConnection(t *testing.T) {
	p := newPKI(t, "kubernetes-admin")
	var conns atomic.Int32
	srv := apiServer(t, p, &conns)
	c, err := New([]byte(adminConf(srv.URL, p)), os.ReadFile)
	require.NoError(t, err)
	for poll := 0; poll < 3; poll++ {
		nodes, err := c.Nodes(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []Node{{Name: "cp-1", Ready: true}, {Name: "w-1"}}, nodes)
	}
	// The point of the package: polls share one TLS connection.
	assert.EqualValues(t, 1, conns.Load(), "3 polls share one connection")
}

// A kubelet's kubeconfig refers to files: the CA, and one PEM file with
// the client certificate and its key (kubelet-client-current.pem).
func TestKubeletGetsItsNodeWithFiles(t *testing.T) {
	p := newPKI(t, "system:node:w-1")
	srv := apiServer(t, p, nil)
	root := t.TempDir()
	write := func(name string, b []byte) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), b, 0o600))
	}
	write("/etc/kubernetes/pki/ca.crt", p.caPEM)
	write("/var/lib/kubelet/pki/kubelet-client-current.pem", append(append([]byte{}, p.clientCert...), p.clientKey...))
	conf := `apiVersion: v1
clusters:
- cluster:
    certificate-authority: /etc/kubernetes/pki/ca.crt
    server: ` + srv.URL + `
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
users:
- name: default-auth
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`
	c, err := New([]byte(conf), func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(root, p)) })
	require.NoError(t, err)
	n, err := c.Node(context.Background(), "w-1")
	require.NoError(t, err)
	assert.Equal(t, Node{Name: "w-1", Ready: true}, n)
	// A kubelet may not list nodes: the answer's status is in the error.
	_, err = c.Nodes(context.Background())
	assert.ErrorContains(t, err, "403")
	assert.ErrorContains(t, err, "forbidden")
	_, err = c.Node(context.Background(), "nope")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestDeleteNode(t *testing.T) {
	p := newPKI(t, "kubernetes-admin")
	srv := apiServer(t, p, nil)
	c, err := New([]byte(adminConf(srv.URL, p)), os.ReadFile)
	require.NoError(t, err)
	assert.NoError(t, c.DeleteNode(context.Background(), "w-1"))
	err = c.DeleteNode(context.Background(), "cp-9")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, "delete node cp-9")

	kubelet := newPKI(t, "system:node:w-1")
	srv = apiServer(t, kubelet, nil)
	c, err = New([]byte(adminConf(srv.URL, kubelet)), os.ReadFile)
	require.NoError(t, err)
	assert.ErrorContains(t, c.DeleteNode(context.Background(), "w-1"), "forbidden", "a kubelet may not delete nodes")
}

func TestServerOfAnotherCAIsRefused(t *testing.T) {
	p, other := newPKI(t, "kubernetes-admin"), newPKI(t, "kubernetes-admin")
	srv := apiServer(t, other, nil)
	c, err := New([]byte(adminConf(srv.URL, p)), os.ReadFile)
	require.NoError(t, err)
	_, err = c.Nodes(context.Background())
	assert.ErrorContains(t, err, "certificate", "an API server of another CA")
}

func TestBadKubeconfigs(t *testing.T) {
	p := newPKI(t, "kubernetes-admin")
	good := adminConf("https://127.0.0.1:7445", p)
	for _, tt := range []struct{ name, conf, want string }{
		{"not YAML", "clusters: [", "parse kubeconfig"},
		{"plain HTTP", strings.Replace(good, "https://", "http://", 1), `is not an https:// URL`},
		{"unknown context", strings.Replace(good, "current-context: kubernetes-admin@lab", "current-context: other", 1), `current-context "other" is not in contexts`},
		{"unknown user", strings.Replace(good, "- name: kubernetes-admin", "- name: someone", 1), `user "kubernetes-admin", which is not in users`},
		{"no client key", strings.Replace(good, "client-key-data: ", "x: ", 1), `client key: neither inline data nor a file`},
		{"bad CA", strings.Replace(good, "certificate-authority-data: ", "certificate-authority-data: AAAA", 1), "certificate authority"},
		{"missing CA file", strings.Replace(good, "certificate-authority-data: "+b64(p.caPEM), "certificate-authority: /nonexistent/ca.crt", 1), "read /nonexistent/ca.crt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New([]byte(tt.conf), os.ReadFile)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	_, err := New([]byte(good), os.ReadFile)
	assert.NoError(t, err, "the good kubeconfig")
}
