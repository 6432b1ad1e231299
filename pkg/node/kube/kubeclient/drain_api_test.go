package kubeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminClient is a client of server, as the PKI's admin.
func adminClient(t *testing.T, mux *http.ServeMux) *Client {
	t.Helper()
	p := newPKI(t, "kubernetes-admin")
	srv := tlsServer(t, p, mux, nil)
	c, err := New([]byte(adminConf(srv.URL, p)), nil)
	require.NoError(t, err)
	return c
}

func TestNodeFieldsAndCordon(t *testing.T) {
	mux := http.NewServeMux()
	var patches []string
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"metadata":{"name":%q,"labels":{"node-role.kubernetes.io/control-plane":""}},`+
			`"spec":{"unschedulable":true},"status":{"nodeInfo":{"kubeletVersion":"v1.33.4"},`+
			`"conditions":[{"type":"Ready","status":"True"}]}}`, r.PathValue("name"))
	})
	mux.HandleFunc("PATCH /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		patches = append(patches, r.PathValue("name")+" "+r.Header.Get("Content-Type")+" "+string(b))
		fmt.Fprintf(w, `{"metadata":{"name":%q}}`, r.PathValue("name"))
	})
	c := adminClient(t, mux)
	ctx := context.Background()

	n, err := c.Node(ctx, "cp-1")
	require.NoError(t, err)
	assert.Equal(t, Node{Name: "cp-1", Ready: true, ControlPlane: true, Unschedulable: true, KubeletVersion: "v1.33.4"}, n)

	require.NoError(t, c.Cordon(ctx, "w-1", true))
	require.NoError(t, c.Cordon(ctx, "w-1", false))
	assert.Equal(t, []string{
		`w-1 application/merge-patch+json {"spec":{"unschedulable":true}}`,
		`w-1 application/merge-patch+json {"spec":{"unschedulable":false}}`,
	}, patches)
}

// A Node's addresses and its worker role label are read; LabelNode
// merge-patches the labels it names and nothing else.
func TestNodeAddressesAndLabelNode(t *testing.T) {
	mux := http.NewServeMux()
	var patches []string
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"metadata":{"name":%q,"labels":{"node-role.kubernetes.io/worker":""}},`+
			`"status":{"addresses":[{"type":"InternalIP","address":"10.77.0.20"},{"type":"Hostname","address":"w-1"}]}}`, r.PathValue("name"))
	})
	mux.HandleFunc("PATCH /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		patches = append(patches, r.PathValue("name")+" "+r.Header.Get("Content-Type")+" "+string(b))
		if r.PathValue("name") == "gone" {
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"metadata":{"name":%q}}`, r.PathValue("name"))
	})
	c := adminClient(t, mux)
	ctx := context.Background()

	n, err := c.Node(ctx, "w-1")
	require.NoError(t, err)
	assert.Equal(t, Node{Name: "w-1", Worker: true, Addresses: []NodeAddress{{"InternalIP", "10.77.0.20"}, {"Hostname", "w-1"}}}, n)

	require.NoError(t, c.LabelNode(ctx, "w-1", map[string]string{WorkerLabel: ""}))
	err = c.LabelNode(ctx, "gone", map[string]string{WorkerLabel: ""})
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, "label node gone")
	assert.Equal(t, []string{
		`w-1 application/merge-patch+json {"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}}`,
		`gone application/merge-patch+json {"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}}`,
	}, patches)
}

func TestPodsOnAndEvict(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/pods", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fieldSelector") != "spec.nodeName=w-1" {
			http.Error(w, "fieldSelector "+r.URL.Query().Get("fieldSelector"), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `{"items":[
 {"metadata":{"namespace":"default","name":"web-1","uid":"u1","ownerReferences":[{"kind":"ReplicaSet","controller":true}]},"status":{"phase":"Running"}},
 {"metadata":{"namespace":"kube-flannel","name":"flannel-x","uid":"u2","ownerReferences":[{"kind":"DaemonSet","controller":true}]},"status":{"phase":"Running"}},
 {"metadata":{"namespace":"kube-system","name":"etcd-w-1","uid":"u3","annotations":{"kubernetes.io/config.mirror":"abc"}},"status":{"phase":"Running"}},
 {"metadata":{"namespace":"default","name":"job-1","uid":"u4","deletionTimestamp":"2026-11-26T10:00:00Z"},"status":{"phase":"Succeeded"}}]}`)
	})
	var evictions []map[string]any
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/pods/{name}/eviction", func(w http.ResponseWriter, r *http.Request) {
		var e map[string]any
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &e))
		evictions = append(evictions, e)
		switch r.PathValue("name") {
		case "web-1":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"kind":"Status","status":"Success"}`)
		case "guarded":
			http.Error(w, `{"kind":"Status","reason":"TooManyRequests","message":"Cannot evict pod as it would violate the pod's disruption budget."}`, http.StatusTooManyRequests)
		default:
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
		}
	})
	c := adminClient(t, mux)
	ctx := context.Background()

	pods, err := c.PodsOn(ctx, "w-1")
	require.NoError(t, err)
	assert.Equal(t, []Pod{
		{Namespace: "default", Name: "web-1", UID: "u1", Phase: "Running", Controlled: true},
		{Namespace: "kube-flannel", Name: "flannel-x", UID: "u2", Phase: "Running", DaemonSet: true, Controlled: true},
		{Namespace: "kube-system", Name: "etcd-w-1", UID: "u3", Phase: "Running", Mirror: true, Annotations: map[string]string{"kubernetes.io/config.mirror": "abc"}},
		{Namespace: "default", Name: "job-1", UID: "u4", Phase: "Succeeded", Deleting: true},
	}, pods)

	require.NoError(t, c.Evict(ctx, pods[0]))
	require.Len(t, evictions, 1)
	assert.Equal(t, "policy/v1", evictions[0]["apiVersion"])
	assert.Equal(t, "Eviction", evictions[0]["kind"])
	assert.Equal(t, map[string]any{"name": "web-1", "namespace": "default"}, evictions[0]["metadata"])
	assert.Equal(t, map[string]any{"preconditions": map[string]any{"uid": "u1"}}, evictions[0]["deleteOptions"])

	err = c.Evict(ctx, Pod{Namespace: "default", Name: "guarded"})
	assert.ErrorIs(t, err, ErrTooManyRequests, "a budget's refusal: %v", err)
	assert.ErrorContains(t, err, "disruption budget")
	err = c.Evict(ctx, Pod{Namespace: "default", Name: "gone"})
	assert.ErrorIs(t, err, ErrNotFound, "a pod gone: %v", err)
}

func TestConfigMapCreateReadUpdate(t *testing.T) {
	mux := http.NewServeMux()
	stored := map[string]configMapJSON{}
	version := 0
	const base = "/api/v1/namespaces/kube-system/configmaps"
	save := func(w http.ResponseWriter, j configMapJSON, code int) {
		version++
		j.Metadata.ResourceVersion = fmt.Sprint(version)
		stored[j.Metadata.Name] = j
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(j)
	}
	read := func(r *http.Request) configMapJSON {
		var j configMapJSON
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &j))
		assert.Equal(t, "v1", j.APIVersion)
		assert.Equal(t, "ConfigMap", j.Kind)
		return j
	}
	mux.HandleFunc("GET "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		j, ok := stored[r.PathValue("name")]
		if !ok {
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(j)
	})
	mux.HandleFunc("POST "+base, func(w http.ResponseWriter, r *http.Request) {
		j := read(r)
		if _, ok := stored[j.Metadata.Name]; ok {
			http.Error(w, `{"kind":"Status","reason":"AlreadyExists"}`, http.StatusConflict)
			return
		}
		save(w, j, http.StatusCreated)
	})
	mux.HandleFunc("PUT "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		j := read(r)
		if stored[r.PathValue("name")].Metadata.ResourceVersion != j.Metadata.ResourceVersion {
			http.Error(w, `{"kind":"Status","reason":"Conflict"}`, http.StatusConflict)
			return
		}
		save(w, j, http.StatusOK)
	})
	c := adminClient(t, mux)
	ctx := context.Background()

	_, err := c.ConfigMap(ctx, "kube-system", "rollout")
	assert.ErrorIs(t, err, ErrNotFound, "%v", err)

	m, err := c.CreateConfigMap(ctx, ConfigMap{Namespace: "kube-system", Name: "rollout", Data: map[string]string{"a": "1"}})
	require.NoError(t, err)
	assert.Equal(t, "1", m.ResourceVersion)
	_, err = c.CreateConfigMap(ctx, ConfigMap{Namespace: "kube-system", Name: "rollout"})
	assert.ErrorIs(t, err, ErrConflict, "%v", err)

	m.Data["a"] = "2"
	m2, err := c.UpdateConfigMap(ctx, m)
	require.NoError(t, err)
	assert.Equal(t, "2", m2.ResourceVersion)
	_, err = c.UpdateConfigMap(ctx, m) // stale
	assert.ErrorIs(t, err, ErrConflict, "%v", err)
	_, err = c.UpdateConfigMap(ctx, ConfigMap{Namespace: "kube-system", Name: "rollout"})
	assert.ErrorContains(t, err, "read it first")

	got, err := c.ConfigMap(ctx, "kube-system", "rollout")
	require.NoError(t, err)
	assert.Equal(t, ConfigMap{Namespace: "kube-system", Name: "rollout", ResourceVersion: "2", Data: map[string]string{"a": "2"}}, got)
}
