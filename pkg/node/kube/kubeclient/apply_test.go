package kubeclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// applied is one server-side apply the fake API received.
type applied struct {
	Path, FieldManager, Force, ContentType, Kind, Namespace string
}

// applyAPI answers PATCH anywhere, recording each request; refuse names
// a path it answers 422 to.
func applyAPI(t *testing.T, refuse string) (*Client, func() []applied) {
	t.Helper()
	var mu sync.Mutex
	var got []applied
	mux := http.NewServeMux()
	mux.HandleFunc("PATCH /", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		var obj struct {
			Kind     string
			Metadata struct{ Namespace string }
		}
		require.NoError(t, json.Unmarshal(b, &obj), "the body is the object, as JSON (which is YAML)")
		mu.Lock()
		got = append(got, applied{Path: r.URL.Path, FieldManager: r.URL.Query().Get("fieldManager"), Force: r.URL.Query().Get("force"),
			ContentType: r.Header.Get("Content-Type"), Kind: obj.Kind, Namespace: obj.Metadata.Namespace})
		mu.Unlock()
		if r.URL.Path == refuse {
			http.Error(w, `{"kind":"Status","message":"DaemonSet.apps is invalid"}`, http.StatusUnprocessableEntity)
			return
		}
		_, _ = w.Write(b) // a failed write fails the client's request
	})
	c := adminClient(t, mux)
	return c, func() []applied {
		mu.Lock()
		defer mu.Unlock()
		return append([]applied(nil), got...)
	}
}

const manifest = `# a comment before the first document
apiVersion: v1
kind: Namespace
metadata:
  name: kube-flannel
---
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: flannel, namespace: kube-flannel}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: "1"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: flannel}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel-ds, namespace: kube-flannel}
spec: {selector: {matchLabels: {app: flannel}}}
`

func TestApplyManifestAppliesEachObjectInOrder(t *testing.T) {
	c, got := applyAPI(t, "")
	require.NoError(t, c.ApplyManifest(context.Background(), []byte(manifest), "terrarium"))
	ssa := func(path, kind, ns string) applied {
		return applied{Path: path, FieldManager: "terrarium", Force: "true", ContentType: "application/apply-patch+yaml", Kind: kind, Namespace: ns}
	}
	assert.Equal(t, []applied{
		ssa("/api/v1/namespaces/kube-flannel", "Namespace", ""),
		ssa("/api/v1/namespaces/kube-flannel/serviceaccounts/flannel", "ServiceAccount", "kube-flannel"),
		// A namespaced object without a namespace goes to "default", as
		// with kubectl, and says so in its body.
		ssa("/api/v1/namespaces/default/configmaps/settings", "ConfigMap", "default"),
		ssa("/apis/rbac.authorization.k8s.io/v1/clusterroles/flannel", "ClusterRole", ""),
		ssa("/apis/apps/v1/namespaces/kube-flannel/daemonsets/kube-flannel-ds", "DaemonSet", "kube-flannel"),
	}, got())
}

func TestApplyManifestNamesTheObjectTheAPIRefused(t *testing.T) {
	c, got := applyAPI(t, "/apis/rbac.authorization.k8s.io/v1/clusterroles/flannel")
	err := c.ApplyManifest(context.Background(), []byte(manifest), "terrarium")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "apply ClusterRole flannel")
	assert.Contains(t, err.Error(), "422")
	assert.Len(t, got(), 4, "nothing after the refused object is sent")
}

// A manifest is parsed whole before anything is sent: a bad document
// anywhere applies nothing, and the error names the document and the fix.
func TestApplyManifestRefusesABadManifestBeforeSending(t *testing.T) {
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"unknown kind", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n",
			`document 2: apiVersion "batch/v1" kind "Job": not a kind this client applies (add it to kubeclient's resources)`},
		{"no name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: a}\n", "document 2: ConfigMap: metadata.name is empty"},
		{"namespace on a cluster-scoped kind", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a, namespace: b}\n",
			`document 2: Namespace a: metadata.namespace "b" on a kind that has none`},
		{"not YAML", "kind: [\n", "document 2: yaml:"},
		{"not a mapping", "- a\n- b\n", "document 2: yaml:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, got := applyAPI(t, "")
			m := "apiVersion: v1\nkind: Namespace\nmetadata: {name: first}\n---\n" + tt.doc
			err := c.ApplyManifest(context.Background(), []byte(m), "terrarium")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Empty(t, got(), "nothing applied")
		})
	}
}

func TestParseManifestPaths(t *testing.T) {
	objs, err := ParseManifest([]byte(manifest))
	require.NoError(t, err)
	var names []string
	for _, o := range objs {
		names = append(names, o.String())
	}
	assert.Equal(t, "Namespace kube-flannel, ServiceAccount kube-flannel/flannel, ConfigMap default/settings, ClusterRole flannel, DaemonSet kube-flannel/kube-flannel-ds",
		strings.Join(names, ", "))
}
