package kubeletpki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnsureServing(t *testing.T) {
	tests := []struct {
		name    string
		before  func(n *node)
		written bool
	}{
		{"none", func(*node) {}, true},
		{"a key without its certificate (cut between the two)", func(n *node) { n.write(servingKey, "half") }, true},
		{"a pair already", func(n *node) {
			c, k := n.ca.Issue(n.t, "w-1", x509.ExtKeyUsageServerAuth)
			n.write(servingCert, c)
			n.write(servingKey, k)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			tt.before(n)
			before, _ := os.ReadFile(filepath.Join(n.dir, servingCert))
			written, err := EnsureServing(n.h, "w-1")
			require.NoError(t, err)
			assert.Equal(t, tt.written, written)
			crt, key := filepath.Join(n.dir, servingCert), filepath.Join(n.dir, servingKey)
			require.NoError(t, usablePair(crt, key), "the kubelet must be able to load the pair")
			after, err := os.ReadFile(crt)
			require.NoError(t, err)
			if !tt.written {
				assert.Equal(t, string(before), string(after), "an existing pair is kept")
				return
			}
			pair, err := tls.LoadX509KeyPair(crt, key)
			require.NoError(t, err)
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			require.NoError(t, err)
			assert.Equal(t, []string{"w-1"}, leaf.DNSNames)
			assert.Contains(t, leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
			assert.IsType(t, &ecdsa.PrivateKey{}, pair.PrivateKey, "not RSA: cheap under TCG")
			assert.True(t, leaf.NotBefore.Before(n.h.Now()) && leaf.NotAfter.After(n.h.Now().AddDate(0, 11, 0)))
			st, err := os.Stat(key)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
			written, err = EnsureServing(n.h, "w-1")
			require.NoError(t, err)
			assert.False(t, written, "a second call keeps the pair")
		})
	}
}
