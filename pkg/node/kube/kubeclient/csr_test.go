package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// csrObject is a CertificateSigningRequest as the API serves it.
func csrObject(name, rv, conditions string) string {
	return fmt.Sprintf(`{"kind":"CertificateSigningRequest","metadata":{"name":%q,"resourceVersion":%q,"uid":"u-1"},`+
		`"spec":{"request":%q,"signerName":"kubernetes.io/kube-apiserver-client-kubelet","usages":["digital signature","client auth"],`+
		`"username":"system:bootstrap:abcdef","groups":["system:bootstrappers"],"extra":{"k":["v"]},"expirationSeconds":3600},`+
		`"status":{"conditions":[%s]}}`, name, rv, b64([]byte("REQUEST")), conditions)
}

func TestCSRsListWatchApproveIssue(t *testing.T) {
	p := newPKI(t, "kubernetes-admin")
	mux := http.NewServeMux()
	var bodies = map[string]map[string]any{}
	record := func(key string, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		bodies[key] = m
	}
	mux.HandleFunc("GET /apis/certificates.k8s.io/v1/certificatesigningrequests", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintf(w, `{"kind":"CertificateSigningRequestList","metadata":{"resourceVersion":"5"},"items":[%s]}`,
				csrObject("csr-a", "4", `{"type":"Approved","status":"True"}`))
			return
		}
		switch r.URL.Query().Get("resourceVersion") {
		case "5":
			fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", csrObject("csr-b", "6", ""))
			fmt.Fprint(w, `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}`+"\n")
		default:
			fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}`+"\n")
		}
	})
	mux.HandleFunc("PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval", func(w http.ResponseWriter, r *http.Request) {
		record("approval "+r.PathValue("name"), r)
		fmt.Fprint(w, csrObject(r.PathValue("name"), "7", `{"type":"Approved","status":"True"}`))
	})
	mux.HandleFunc("PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status", func(w http.ResponseWriter, r *http.Request) {
		record("status "+r.PathValue("name"), r)
		if r.PathValue("name") == "csr-late" {
			http.Error(w, `{"kind":"Status","code":409}`, http.StatusConflict)
			return
		}
		fmt.Fprint(w, csrObject(r.PathValue("name"), "8", `{"type":"Approved","status":"True"}`))
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		record("review", r)
		fmt.Fprint(w, `{"status":{"allowed":true}}`)
	})
	srv := tlsServer(t, p, mux, nil)
	c, err := New([]byte(adminConf(srv.URL, p)), os.ReadFile)
	require.NoError(t, err)
	ctx := context.Background()

	list, rv, err := c.CSRs(ctx)
	require.NoError(t, err)
	assert.Equal(t, "5", rv)
	require.Len(t, list, 1)
	a := list[0]
	assert.Equal(t, "csr-a", a.Name)
	assert.True(t, a.Approved)
	assert.False(t, a.Denied)
	assert.Equal(t, []byte("REQUEST"), a.Request)
	assert.Equal(t, "system:bootstrap:abcdef", a.Username)
	assert.Equal(t, map[string][]string{"k": {"v"}}, a.Extra)
	assert.EqualValues(t, 3600, a.ExpirationSeconds)

	var seen []string
	rv, err = c.WatchCSRs(ctx, rv, func(csr CSR) { seen = append(seen, csr.Name+"@"+csr.ResourceVersion) })
	require.NoError(t, err)
	assert.Equal(t, []string{"csr-b@6"}, seen)
	assert.Equal(t, "9", rv, "a bookmark moves the resource version on")
	_, err = c.WatchCSRs(ctx, rv, func(CSR) {})
	assert.True(t, errors.Is(err, ErrGone), "%v", err)

	ok, err := c.CanCreateCSRs(ctx, a, "nodeclient")
	require.NoError(t, err)
	assert.True(t, ok)
	spec := bodies["review"]["spec"].(map[string]any)
	assert.Equal(t, "system:bootstrap:abcdef", spec["user"])
	assert.Equal(t, map[string]any{"group": "certificates.k8s.io", "resource": "certificatesigningrequests",
		"verb": "create", "subresource": "nodeclient", "version": "*"}, spec["resourceAttributes"])

	b := CSR{}
	for _, csr := range []string{csrObject("csr-b", "6", "")} {
		b, err = decodeCSR([]byte(csr))
		require.NoError(t, err)
	}
	approved, err := c.ApproveCSR(ctx, b, "AutoApproved", "why")
	require.NoError(t, err)
	assert.True(t, approved.Approved)
	sent := bodies["approval csr-b"]
	assert.Equal(t, "6", sent["metadata"].(map[string]any)["resourceVersion"], "the update names the version it read")
	assert.Equal(t, []any{map[string]any{"type": "Approved", "status": "True", "reason": "AutoApproved", "message": "why"}},
		sent["status"].(map[string]any)["conditions"])
	assert.Empty(t, b.raw["status"].(map[string]any)["conditions"], "the read request is not changed")

	require.NoError(t, c.IssueCSR(ctx, approved, []byte("CERT")))
	assert.Equal(t, b64([]byte("CERT")), bodies["status csr-b"]["status"].(map[string]any)["certificate"])
	late := approved
	late.Name = "csr-late"
	assert.True(t, errors.Is(c.IssueCSR(ctx, late, []byte("CERT")), ErrConflict))
}
