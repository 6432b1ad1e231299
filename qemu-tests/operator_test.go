//go:build e2e

package qemutests

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// forwardAPI forwards a host port to the machine's API server.
func (m *machine) forwardAPI() int {
	port := freePort(m.t)
	m.forward = append(m.forward, fmt.Sprintf("tcp:127.0.0.1:%d-:6443", port))
	return port
}

// checkOperatorKubeconfig uses the operator's kubeconfig that `imagebuild
// config cluster` wrote, from the host, as a person would with kubectl:
// through the forwarded port, the API server checked for the name its
// certificate carries (the control plane's cluster address). It lists the
// nodes and writes an object, which only an admin may in the default
// namespace.
func checkOperatorKubeconfig(ctx context.Context, t *testing.T, path string, port int, serverName string, names ...string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the operator's kubeconfig is owner-only")

	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(data, &doc))
	cluster := doc["clusters"].([]any)[0].(map[string]any)["cluster"].(map[string]any)
	assert.Equal(t, "https://"+serverName+":6443", cluster["server"])
	cluster["server"] = fmt.Sprintf("https://127.0.0.1:%d", port)
	cluster["tls-server-name"] = serverName
	tunneled, err := yaml.Marshal(doc)
	require.NoError(t, err)

	c, err := kubeclient.New(tunneled, nil)
	require.NoError(t, err)
	defer c.CloseIdleConnections()
	nodes, err := c.Nodes(ctx)
	require.NoError(t, err, "the operator's kubeconfig lists the nodes from the host")
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = n.Ready
	}
	for _, n := range names {
		assert.True(t, ready[n], "node %s Ready, as the operator sees it", n)
	}
	now := time.Now()
	l, err := c.CreateLease(ctx, kubeclient.Lease{Namespace: "default", Name: "operator-check", Holder: "terrarium-operator", DurationSeconds: 60, AcquireTime: now, RenewTime: now})
	require.NoError(t, err, "the operator may write where only an admin may")
	assert.Equal(t, "terrarium-operator", l.Holder)
	t.Logf("operator kubeconfig from the host: %d nodes listed, a Lease written", len(nodes))
}
