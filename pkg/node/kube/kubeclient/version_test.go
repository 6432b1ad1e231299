package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionAtEachServer: a client made from a kubeconfig that names one
// server (the node's balancer) asks two others, At their addresses, for
// their versions, with the same credentials.
func TestVersionAtEachServer(t *testing.T) {
	p := newPKI(t, "system:node:w-1")
	server := func(version string) *url.URL {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"major":"1","minor":"37","gitVersion":%q,"platform":"linux/amd64"}`, version)
		})
		u, err := url.Parse(tlsServer(t, p, mux, nil).URL)
		require.NoError(t, err)
		return u
	}
	a, b := server("v1.37.0"), server("v1.36.3")
	c, err := New([]byte(adminConf("https://127.0.0.1:1", p)), os.ReadFile) // nothing listens there
	require.NoError(t, err)

	for _, tc := range []struct {
		at   *url.URL
		want string
	}{{a, "v1.37.0"}, {b, "v1.36.3"}} {
		v, err := c.At(tc.at.Host).Version(context.Background())
		require.NoError(t, err)
		assert.Equal(t, tc.want, v)
	}
	_, err = c.Version(context.Background())
	assert.Error(t, err, "the kubeconfig's own server is not asked by At's clients")

	empty := http.NewServeMux()
	empty.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"major":"1"}`) })
	u, err := url.Parse(tlsServer(t, p, empty, nil).URL)
	require.NoError(t, err)
	_, err = c.At(u.Host).Version(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names no gitVersion")
}
