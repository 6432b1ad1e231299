package kubeclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every Secret is written back as it was listed, page by page; one
// deleted or changed since the list is left; another error stops the
// rewrite and names the Secret.
func TestRewriteSecrets(t *testing.T) {
	secret := func(ns, name string) string {
		return fmt.Sprintf(`{"kind":"Secret","apiVersion":"v1","metadata":{"namespace":%q,"name":%q,"resourceVersion":"7"},"data":{"k":"dg=="}}`, ns, name)
	}
	pages := map[string]string{
		"":   `{"kind":"SecretList","metadata":{"continue":"p2"},"items":[` + secret("default", "a") + `,` + secret("kube-system", "gone") + `]}`,
		"p2": `{"kind":"SecretList","metadata":{},"items":[` + secret("default", "changed") + `,` + secret("apps", "b") + `]}`,
	}
	var (
		mu     sync.Mutex
		puts   = map[string]string{}
		broken bool
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/secrets", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("limit") != "100" {
			http.Error(w, "no limit", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, pages[r.URL.Query().Get("continue")])
	})
	mux.HandleFunc("PUT /api/v1/namespaces/{ns}/secrets/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		switch name := r.PathValue("name"); {
		case name == "gone":
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
		case name == "changed":
			http.Error(w, `{"kind":"Status","reason":"Conflict"}`, http.StatusConflict)
		case broken && name == "b":
			http.Error(w, `{"kind":"Status","message":"etcd is sad"}`, http.StatusInternalServerError)
		default:
			puts[r.PathValue("ns")+"/"+name] = string(b)
			fmt.Fprint(w, string(b))
		}
	})
	c := adminClient(t, mux)
	var seen []int
	n, err := c.RewriteSecrets(context.Background(), func(k int) { seen = append(seen, k) })
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, []int{1, 2}, seen, "progress after each page")
	assert.JSONEq(t, secret("default", "a"), puts["default/a"], "written back unchanged, resourceVersion included")
	assert.JSONEq(t, secret("apps", "b"), puts["apps/b"])

	broken = true
	_, err = c.RewriteSecrets(context.Background(), nil)
	require.Error(t, err)
	assert.ErrorContains(t, err, "rewrite Secret apps/b")
	assert.True(t, strings.Contains(err.Error(), "etcd is sad"), "%v", err)
}

func TestPodReadyAndAnnotations(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/kube-system/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != "kube-apiserver-cp-1" {
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"metadata":{"namespace":"kube-system","name":"kube-apiserver-cp-1","annotations":{"a":"b"}},`+
			`"status":{"phase":"Running","conditions":[{"type":"Initialized","status":"True"},{"type":"Ready","status":"True"}]}}`)
	})
	c := adminClient(t, mux)
	p, err := c.Pod(context.Background(), "kube-system", "kube-apiserver-cp-1")
	require.NoError(t, err)
	assert.True(t, p.Ready)
	assert.Equal(t, map[string]string{"a": "b"}, p.Annotations)
	_, err = c.Pod(context.Background(), "kube-system", "kube-apiserver-cp-2")
	assert.ErrorIs(t, err, ErrNotFound)
}
