package kubeclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A joining node asks with its bootstrap token (a kubeconfig user with a
// token and no certificate): the server sees it as a bearer token.
func TestBootstrapTokenUser(t *testing.T) {
	p := newPKI(t, "unused")
	var auth []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		if r.PathValue("name") != "w-1" {
			http.Error(w, `{"kind":"Status","message":"not found"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"metadata":{"name":"w-1"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`)
	})
	srv := httptest.NewUnstartedServer(mux)
	cert, err := tls.X509KeyPair(p.serverCert, p.serverKey)
	require.NoError(t, err)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}} // no client certificate asked
	srv.StartTLS()
	t.Cleanup(srv.Close)

	conf := `apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority-data: ` + b64(p.caPEM) + `, server: ` + srv.URL + `}
  name: c
contexts:
- context: {cluster: c, user: tls-bootstrap-token-user}
  name: join
current-context: join
users:
- name: tls-bootstrap-token-user
  user: {token: abcdef.0123456789abcdef}
`
	c, err := New([]byte(conf), nil)
	require.NoError(t, err)
	n, err := c.Node(context.Background(), "w-1")
	require.NoError(t, err)
	assert.Equal(t, Node{Name: "w-1", Ready: true}, n)
	_, err = c.Node(context.Background(), "w-2")
	assert.True(t, errors.Is(err, ErrNotFound), "%v", err)
	assert.Equal(t, []string{"Bearer abcdef.0123456789abcdef", "Bearer abcdef.0123456789abcdef"}, auth)
}
