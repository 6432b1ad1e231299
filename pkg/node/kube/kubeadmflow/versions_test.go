package kubeadmflow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noAPIVersion is the APIVersion of tests that ask no API server.
func noAPIVersion(context.Context, string, string) (string, error) {
	return "", errors.New("no API server in this test")
}

func TestAPIServerVersions(t *testing.T) {
	f := testFlow(t, nil)
	eps := []string{"10.0.0.10:6443", "10.0.0.11:6443", "10.0.0.12:6443"}
	answers := map[string]string{"10.0.0.10:6443": "v1.37.0", "10.0.0.12:6443": "v1.36.3"}
	var asked []string
	f.Deps.APIVersion = func(_ context.Context, kubeconfig, ep string) (string, error) {
		assert.Equal(t, KubeletKubeconfig, kubeconfig, "the kubelet's credentials")
		asked = append(asked, ep)
		if v, ok := answers[ep]; ok {
			return v, nil
		}
		return "", errors.New("connection refused")
	}

	vs, err := f.APIServerVersions(context.Background(), eps)
	require.NoError(t, err, "a node that has not joined has no API servers to ask")
	assert.Nil(t, vs)
	assert.Empty(t, asked)

	p := f.Host.Path(KubeletKubeconfig)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("apiVersion: v1\n"), 0o600))
	vs, err = f.APIServerVersions(context.Background(), eps)
	assert.Equal(t, eps, asked, "every control plane is asked")
	assert.Equal(t, []string{"v1.37.0", "v1.36.3"}, vs, "the answers")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the API server at 10.0.0.11:6443: connection refused")
	assert.NotContains(t, err.Error(), "10.0.0.10")
}
