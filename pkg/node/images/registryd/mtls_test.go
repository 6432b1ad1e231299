package registryd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/testvm/testpki"
)

func write(t *testing.T, path string, data []byte) string {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// start runs a registry daemon with cfg until the test ends and returns
// its loopback address.
func start(t *testing.T, dir string, bundle string, cfg Config) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	addr := freeAddr(t)
	runUntilCleanup(t, Options{BundleDir: bundle, CacheDir: filepath.Join(dir, "cache"), ConfigFile: write(t, filepath.Join(dir, "registry.json"), b),
		Loopback: addr, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return addr
}

// A control plane serves its peers over mutual TLS: a worker registry
// showing a client certificate of the cluster CA gets an image it lacks
// from it; one showing none, or one of another CA, is refused in the
// handshake. The client certificate is read at each connection, so the
// kubelet's (one file holding certificate and key) counts from the moment
// it appears.
func TestPeersNeedAClientCertificate(t *testing.T) {
	dir := t.TempDir()
	cluster, other := testpki.NewCA(t, "kubernetes"), testpki.NewCA(t, "kubernetes")
	ca := write(t, filepath.Join(dir, "ca.pem"), []byte(cluster.CertPEM))

	bundle := filepath.Join(dir, "bundle")
	p, err := layout.Write(bundle, empty.Index)
	require.NoError(t, err)
	img, err := random.Image(1024, 1)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "quay.io/terrarium/sideloaded:1.0"})))
	serving, servingKey := cluster.Issue(t, "terrarium-registry cp-1", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	listen := freeAddr(t)
	start(t, filepath.Join(dir, "cp"), bundle, Config{Serve: true, Listen: listen, CAFile: ca,
		CertFile: write(t, filepath.Join(dir, "serving.pem"), []byte(serving)), KeyFile: write(t, filepath.Join(dir, "serving-key.pem"), []byte(servingKey))})

	pull := func(worker string) int {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://%s/v2/terrarium/sideloaded/manifests/1.0?ns=quay.io", worker))
		require.NoError(t, err)
		_ = resp.Body.Close() // only the status and headers count
		return resp.StatusCode
	}
	kubelet := filepath.Join(dir, "kubelet-client-current.pem")
	cert, key := cluster.Issue(t, "system:node:w-1", x509.ExtKeyUsageClientAuth)
	foreign, foreignKey := other.Issue(t, "system:node:w-1", x509.ExtKeyUsageClientAuth)
	for _, tc := range []struct {
		name   string
		before func() // before the pull
		client [2]string
		want   int
	}{
		{"a client certificate of the cluster CA", nil, [2]string{write(t, filepath.Join(dir, "c.pem"), []byte(cert)), write(t, filepath.Join(dir, "c-key.pem"), []byte(key))}, http.StatusOK},
		{"none", nil, [2]string{}, http.StatusNotFound},
		{"another CA's", nil, [2]string{write(t, filepath.Join(dir, "f.pem"), []byte(foreign)), write(t, filepath.Join(dir, "f-key.pem"), []byte(foreignKey))}, http.StatusNotFound},
		{"the kubelet's, before the node joined", nil, [2]string{kubelet, kubelet}, http.StatusNotFound},
		{"the kubelet's, once there", func() { write(t, kubelet, []byte(cert+key)) }, [2]string{kubelet, kubelet}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worker := start(t, filepath.Join(dir, "w", tc.name), "", Config{Peers: []string{listen}, CAFile: ca, ClientCertFile: tc.client[0], ClientKeyFile: tc.client[1]})
			if tc.before != nil {
				tc.before()
			}
			assert.Equal(t, tc.want, pull(worker))
		})
	}

	// Any host of the network without a certificate: refused in the
	// handshake, before a byte of the registry is served.
	pool := x509.NewCertPool()
	pool.AddCert(cluster.Cert)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	_, err = c.Get("https://" + listen + "/v2/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate required")
}

// runUntilCleanup runs the daemon with o until the test ends, once it has
// told systemd it is ready; its error at the end fails the test.
func runUntilCleanup(t *testing.T, o Options) {
	t.Helper()
	ready := make(chan struct{})
	o.Notify = func() error { close(ready); return nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after 10s")
	}
}
