package kubeadmflow

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// AdmitNodes runs the admission on a control plane, as the admin with the
// cluster CA and the control planes' addresses, one at a time; a worker
// admits no one.
func TestAdmitNodes(t *testing.T) {
	f := testFlow(t, nil)
	var mu sync.Mutex
	var calls []string
	started, release := make(chan struct{}), make(chan struct{})
	f.Admission = func(ctx context.Context, kubeconfig, pkiDir string, controlPlanes []string) error {
		mu.Lock()
		calls = append(calls, kubeconfig+" "+pkiDir+" "+controlPlanes[0]+","+controlPlanes[1])
		mu.Unlock()
		close(started)
		<-release
		return ctx.Err()
	}
	cp := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleControlPlane, ControlPlanes: []string{"10.77.0.10", "10.77.0.11"}}}
	ctx := context.Background()
	done := make(chan error)
	go func() { done <- f.AdmitNodes(ctx, cp) }()
	<-started
	require.NoError(t, f.AdmitNodes(ctx, cp), "a second call while one runs returns at once")
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, []string{AdminKubeconfig + " " + KubernetesPKIDir + " 10.77.0.10,10.77.0.11"}, calls)

	worker := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleWorker}}
	require.NoError(t, f.AdmitNodes(ctx, worker))
	require.NoError(t, f.AdmitNodes(ctx, &machineconfig.Config{}))
	f.Admission = nil
	require.NoError(t, f.AdmitNodes(ctx, cp), "no admission: nothing to run")
	assert.Len(t, calls, 1)
}

// Once the init node's cluster is joinable, the signer watches for the
// formation's window and the admission runs on, both as the admin.
func TestAdmitFromFormation(t *testing.T) {
	f := testFlow(t, nil)
	signed, admitted := make(chan string, 1), make(chan string, 1)
	f.KubeletCSRs = func(ctx context.Context, kubeconfig, pkiDir string) error {
		deadline, ok := ctx.Deadline()
		assert.True(t, ok && time.Until(deadline) <= kubeletCSRWindow, "the signer watches for the window only")
		signed <- kubeconfig
		return nil
	}
	f.Admission = func(ctx context.Context, kubeconfig, pkiDir string, controlPlanes []string) error {
		_, ok := ctx.Deadline()
		assert.False(t, ok, "the admission runs for as long as firstboot")
		admitted <- kubeconfig
		return nil
	}
	c := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleInit, ControlPlanes: []string{"10.77.0.10"}}}
	f.admitFromFormation(context.Background(), c)
	assert.Equal(t, AdminKubeconfig, <-signed)
	assert.Equal(t, AdminKubeconfig, <-admitted)
}

// clusterCA writes a cluster CA (ECDSA, as imagebuild makes it) into the
// flow's PKI directory.
func clusterCA(t *testing.T, f *Flow) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kd, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	write(t, f, KubernetesPKIDir+"/ca.crt", 0o600, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, f, KubernetesPKIDir+"/ca.key", 0o600, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})))
}

// One admission pass, against an API server: w-1's serving request for
// its own name and address is approved and signed, and w-1 (not cp-1,
// nor cp-2, which kubeadm has not labelled yet) is labelled a worker.
func TestAdmissionPass(t *testing.T) {
	f := testFlow(t, nil)
	clusterCA(t, f)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	reqDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:w-1", Organization: []string{"system:nodes"}},
		DNSNames: []string{"w-1"}, IPAddresses: []net.IP{net.ParseIP("10.77.0.20")}}, key)
	require.NoError(t, err)
	csr := fmt.Sprintf(`{"metadata":{"name":"csr-s","resourceVersion":"%%s"},"spec":{"request":%q,"signerName":"kubernetes.io/kubelet-serving",`+
		`"usages":["digital signature","key encipherment","server auth"],"username":"system:node:w-1","groups":["system:nodes","system:authenticated"]},"status":{%%s}}`,
		base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: reqDER})))
	node := func(name, ip, labels string) string {
		return fmt.Sprintf(`{"metadata":{"name":%q,"labels":{%s}},"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}]}}`, name, labels, ip, name)
	}
	var mu sync.Mutex
	var did []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /apis/certificates.k8s.io/v1/certificatesigningrequests", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"5"},"items":[%s]}`, fmt.Sprintf(csr, "4", ""))
	})
	mux.HandleFunc("PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/csr-s/approval", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		did = append(did, "approved")
		mu.Unlock()
		fmt.Fprintf(w, csr, "6", `"conditions":[{"type":"Approved","status":"True"}]`)
	})
	mux.HandleFunc("PUT /apis/certificates.k8s.io/v1/certificatesigningrequests/csr-s/status", func(w http.ResponseWriter, r *http.Request) {
		var obj struct {
			Status struct {
				Certificate []byte `json:"certificate"`
			} `json:"status"`
		}
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&obj))
		b, _ := pem.Decode(obj.Status.Certificate)
		if assert.NotNil(t, b) {
			cert, err := x509.ParseCertificate(b.Bytes)
			if assert.NoError(t, err) {
				assert.Equal(t, []string{"w-1"}, cert.DNSNames)
			}
		}
		mu.Lock()
		did = append(did, "signed")
		mu.Unlock()
		fmt.Fprintf(w, csr, "7", `"conditions":[{"type":"Approved","status":"True"}]`)
	})
	mux.HandleFunc("GET /api/v1/nodes/w-1", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, node("w-1", "10.77.0.20", "")) })
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"items":[%s,%s,%s]}`, node("cp-1", "10.77.0.10", `"node-role.kubernetes.io/control-plane":""`),
			node("cp-2", "10.77.0.11", ""), node("w-1", "10.77.0.20", ""))
	})
	mux.HandleFunc("PATCH /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		did = append(did, "label "+r.PathValue("name")+" "+string(b))
		mu.Unlock()
		fmt.Fprint(w, node(r.PathValue("name"), "10.77.0.20", ""))
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "` + srv.URL + `", certificate-authority-data: "` +
		base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})) + `"}}]
contexts: [{name: admin, context: {cluster: lab, user: admin}}]
current-context: admin
users: [{name: admin, user: {token: "admin-token"}}]
`
	client := func(string) (*kubeclient.Client, error) { return kubeclient.New([]byte(kubeconfig), os.ReadFile) }
	a := &admission{h: f.Host, client: client, kubeconfig: AdminKubeconfig, pkiDir: KubernetesPKIDir, controlPlanes: []string{"10.77.0.10", "10.77.0.11"}}
	defer a.close()
	require.NoError(t, a.pass(context.Background()))
	assert.Equal(t, []string{"approved", "signed", `label w-1 {"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}}`}, did)

	noCA := &admission{h: testFlow(t, nil).Host, client: client, kubeconfig: AdminKubeconfig, pkiDir: KubernetesPKIDir}
	assert.ErrorContains(t, noCA.pass(context.Background()), "ca.crt", "no CA yet: the next pass tries again")
}
