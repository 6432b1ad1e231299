package machineconfig

import (
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/terrarium-os/terrarium/pkg/testvm/testpki"
)

// A peer's client certificate must pair with its key, be for client
// authentication and come from the CA the peers check it with.
func TestRegistryClientCertificate(t *testing.T) {
	ca, other := testpki.NewCA(t, "kubernetes"), testpki.NewCA(t, "kubernetes")
	cert, key := ca.Issue(t, "system:node:w-1", x509.ExtKeyUsageClientAuth)
	server, serverKey := ca.Issue(t, "registry", x509.ExtKeyUsageServerAuth)
	foreign, foreignKey := other.Issue(t, "system:node:w-1", x509.ExtKeyUsageClientAuth)
	_, otherKey := ca.Issue(t, "system:node:w-1", x509.ExtKeyUsageClientAuth)
	for _, tc := range []struct {
		name      string
		cert, key string
		want      string // "" is valid
	}{
		{"none: a cluster node shows its kubelet's", "", "", ""},
		{"a client certificate of the CA", cert, key, ""},
		{"certificate without key", cert, "", "clientCertificate and clientKey go together"},
		{"key without certificate", "", key, "clientCertificate and clientKey go together"},
		{"another key", cert, otherKey, "do not form a valid pair"},
		{"a serving certificate", server, serverKey, "is not a client certificate of the cluster CA"},
		{"another CA", foreign, foreignKey, "is not a client certificate of the cluster CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.Registry = &Registry{Peers: []string{"10.0.0.11:5443"}, CA: ca.CertPEM, ClientCertificate: tc.cert, ClientKey: tc.key}
			err := c.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "$.registry.clientCertificate")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// signedBundlesOnly needs a key to check bundles with.
func TestSignedBundlesOnlyNeedsTrustedKeys(t *testing.T) {
	c := validConfig()
	c.Registry = &Registry{SignedBundlesOnly: true}
	err := c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "$.registry.signedBundlesOnly")
	assert.Contains(t, err.Error(), "add the signing key's public half")

	c.TrustedKeys = bare("ed25519:7Dk7PWAuF2dvs+89QQwuY0TXKmWrdbzHt3t6JOqD4tE=")
	assert.NoError(t, c.Validate())
}
