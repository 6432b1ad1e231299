package kubeletpki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/node/host"
	"github.com/terrarium-os/terrarium/pkg/testvm/testpki"
)

// node is a root with the kubelet's PKI directory.
type node struct {
	t   *testing.T
	h   *host.Host
	dir string
	ca  testpki.CA
}

func newNode(t *testing.T) *node {
	root := t.TempDir()
	n := &node{t: t, h: &host.Host{Root: root, Clock: host.ClockFunc(time.Now)},
		dir: filepath.Join(root, layout.KubeletPKIDir), ca: testpki.NewCA(t, "kubernetes")}
	require.NoError(t, os.MkdirAll(n.dir, 0o700))
	return n
}

func (n *node) write(name, content string) {
	require.NoError(n.t, os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o600))
}

func (n *node) pair(usage x509.ExtKeyUsage) (string, string) {
	return n.ca.Issue(n.t, "system:node:cp-1", usage)
}

func (n *node) repair() ([]string, string) {
	var console strings.Builder
	done, err := Repair(n.h, &console)
	require.NoError(n.t, err)
	return done, console.String()
}

func TestServingPair(t *testing.T) {
	tests := []struct {
		name    string
		crt     func(cert string) string
		key     func(key string) string
		removed bool
	}{
		{"intact", func(c string) string { return c }, func(k string) string { return k }, false},
		{"empty certificate", func(string) string { return "" }, func(k string) string { return k }, true},
		{"empty key", func(c string) string { return c }, func(string) string { return "" }, true},
		{"truncated certificate", func(c string) string { return c[:len(c)/2] }, func(k string) string { return k }, true},
		{"key of another pair", func(c string) string { return c }, func(string) string {
			_, k := testpki.NewCA(t, "other").Issue(t, "x", x509.ExtKeyUsageServerAuth)
			return k
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			c, k := n.pair(x509.ExtKeyUsageServerAuth)
			n.write(servingCert, tt.crt(c))
			n.write(servingKey, tt.key(k))
			done, console := n.repair()
			if !tt.removed {
				assert.Empty(t, done)
				assert.FileExists(t, filepath.Join(n.dir, servingCert))
				return
			}
			require.Len(t, done, 1)
			assert.Contains(t, console, "kubelet.crt, kubelet.key) was unusable")
			assert.NoFileExists(t, filepath.Join(n.dir, servingCert))
			assert.NoFileExists(t, filepath.Join(n.dir, servingKey))
		})
	}
	t.Run("only a key left", func(t *testing.T) {
		n := newNode(t)
		_, k := n.pair(x509.ExtKeyUsageServerAuth)
		n.write(servingKey, k)
		done, _ := n.repair()
		assert.Len(t, done, 1)
		assert.NoFileExists(t, filepath.Join(n.dir, servingKey))
	})
	t.Run("no kubelet yet", func(t *testing.T) {
		n := newNode(t)
		done, console := n.repair()
		assert.Empty(t, done)
		assert.Empty(t, console)
	})
}

func TestClientCertificate(t *testing.T) {
	current := filepath.Base(layout.KubeletClientCert)
	t.Run("a torn rotation points back to the last intact one", func(t *testing.T) {
		n := newNode(t)
		c, k := n.pair(x509.ExtKeyUsageClientAuth)
		n.write("kubelet-client-2026-11-26-10-00-00.pem", c+k)
		c2, k2 := n.pair(x509.ExtKeyUsageClientAuth)
		n.write("kubelet-client-2026-11-26-11-00-00.pem", c2+k2)
		n.write("kubelet-client-2026-11-26-12-00-00.pem", "") // torn by the cut
		require.NoError(t, os.Symlink(filepath.Join(n.dir, "kubelet-client-2026-11-26-12-00-00.pem"), filepath.Join(n.dir, current)))
		done, console := n.repair()
		require.Len(t, done, 1, console)
		target, err := os.Readlink(filepath.Join(n.dir, current))
		require.NoError(t, err)
		assert.Equal(t, "kubelet-client-2026-11-26-11-00-00.pem", target, "the newest intact one")
		assert.Contains(t, console, "points to kubelet-client-2026-11-26-11-00-00.pem again")
		again, _ := n.repair()
		assert.Empty(t, again, "repaired once")
	})
	t.Run("intact", func(t *testing.T) {
		n := newNode(t)
		c, k := n.pair(x509.ExtKeyUsageClientAuth)
		n.write("kubelet-client-2026-11-26-10-00-00.pem", c+k)
		require.NoError(t, os.Symlink("kubelet-client-2026-11-26-10-00-00.pem", filepath.Join(n.dir, current)))
		done, _ := n.repair()
		assert.Empty(t, done)
	})
	t.Run("nothing intact to go back to", func(t *testing.T) {
		n := newNode(t)
		n.write("kubelet-client-2026-11-26-12-00-00.pem", "-----BEGIN CERT")
		require.NoError(t, os.Symlink("kubelet-client-2026-11-26-12-00-00.pem", filepath.Join(n.dir, current)))
		done, console := n.repair()
		require.Len(t, done, 1)
		assert.Contains(t, console, "no earlier one is intact")
		target, err := os.Readlink(filepath.Join(n.dir, current))
		require.NoError(t, err)
		assert.Equal(t, "kubelet-client-2026-11-26-12-00-00.pem", target, "left as it was")
	})
}

// A serving certificate the cluster issued (serverTLSBootstrap), torn by a
// power cut while the kubelet rotated it, is pointed back to the last
// intact one like a client certificate; with none intact it is removed,
// and the kubelet asks for a new one instead of failing at every start.
func TestServingCertificateIssued(t *testing.T) {
	current := "kubelet-server-current.pem"
	t.Run("a torn rotation points back to the last intact one", func(t *testing.T) {
		n := newNode(t)
		c, k := n.pair(x509.ExtKeyUsageServerAuth)
		n.write("kubelet-server-2026-11-26-10-00-00.pem", c+k)
		n.write("kubelet-server-2026-11-26-12-00-00.pem", "")
		require.NoError(t, os.Symlink(filepath.Join(n.dir, "kubelet-server-2026-11-26-12-00-00.pem"), filepath.Join(n.dir, current)))
		done, console := n.repair()
		require.Len(t, done, 1, console)
		target, err := os.Readlink(filepath.Join(n.dir, current))
		require.NoError(t, err)
		assert.Equal(t, "kubelet-server-2026-11-26-10-00-00.pem", target)
		assert.Contains(t, console, "serving certificate /var/lib/kubelet/pki/kubelet-server-current.pem was unusable")
	})
	t.Run("none intact: removed, asked for again", func(t *testing.T) {
		n := newNode(t)
		n.write("kubelet-server-2026-11-26-12-00-00.pem", "-----BEGIN CERT")
		require.NoError(t, os.Symlink("kubelet-server-2026-11-26-12-00-00.pem", filepath.Join(n.dir, current)))
		done, console := n.repair()
		require.Len(t, done, 1)
		assert.Contains(t, console, "removed; the kubelet asks for a new one")
		_, err := os.Lstat(filepath.Join(n.dir, current))
		assert.ErrorIs(t, err, os.ErrNotExist)
		again, _ := n.repair()
		assert.Empty(t, again)
	})
	t.Run("intact", func(t *testing.T) {
		n := newNode(t)
		c, k := n.pair(x509.ExtKeyUsageServerAuth)
		n.write("kubelet-server-2026-11-26-10-00-00.pem", c+k)
		require.NoError(t, os.Symlink("kubelet-server-2026-11-26-10-00-00.pem", filepath.Join(n.dir, current)))
		done, _ := n.repair()
		assert.Empty(t, done)
	})
}
