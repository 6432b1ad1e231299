package csrsigner

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

var now = time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)

func newCA(t *testing.T, notAfter time.Time) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca, key
}

// request is a PEM certificate request as a kubelet makes it, changed by
// edit.
func request(t *testing.T, edit func(*x509.CertificateRequest)) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:w-1", Organization: []string{"system:nodes"}}}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func bootstrapCSR(t *testing.T, edit func(*x509.CertificateRequest)) kubeclient.CSR {
	return kubeclient.CSR{Name: "csr-1", ResourceVersion: "10", SignerName: KubeletClientSigner,
		Request: request(t, edit), Usages: []string{"digital signature", "client auth"},
		Username: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token", "system:authenticated"}}
}

// fakeAPI records what the signer asks and answers as told.
type fakeAPI struct {
	mu       sync.Mutex
	allowed  map[string]bool // subresource → the review's answer
	reviews  []string
	approved []string
	issued   map[string][]byte
	// approveErr fails the approval (a conflict with the controller
	// manager).
	approveErr error
	list       []kubeclient.CSR
	watch      []kubeclient.CSR
	watched    chan struct{}
	// nodes are the API's Nodes by name; nodeErr fails every read.
	nodes   map[string]kubeclient.Node
	nodeErr error
}

func (f *fakeAPI) Node(_ context.Context, name string) (kubeclient.Node, error) {
	if f.nodeErr != nil {
		return kubeclient.Node{}, f.nodeErr
	}
	n, ok := f.nodes[name]
	if !ok {
		return kubeclient.Node{}, fmt.Errorf("node %s: %w", name, kubeclient.ErrNotFound)
	}
	return n, nil
}

func (f *fakeAPI) CSRs(context.Context) ([]kubeclient.CSR, string, error) {
	return f.list, "1", nil
}

func (f *fakeAPI) WatchCSRs(ctx context.Context, rv string, fn func(kubeclient.CSR)) (string, error) {
	for _, c := range f.watch {
		fn(c)
	}
	f.watch = nil
	if f.watched != nil {
		close(f.watched)
		f.watched = nil
	}
	<-ctx.Done()
	return rv, ctx.Err()
}

func (f *fakeAPI) CanCreateCSRs(_ context.Context, csr kubeclient.CSR, sub string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews = append(f.reviews, csr.Username+" "+sub)
	return f.allowed[sub], nil
}

func (f *fakeAPI) ApproveCSR(_ context.Context, csr kubeclient.CSR, reason, _ string) (kubeclient.CSR, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.approveErr != nil {
		return kubeclient.CSR{}, f.approveErr
	}
	f.approved = append(f.approved, csr.Name+" "+reason)
	csr.Approved = true
	return csr, nil
}

func (f *fakeAPI) IssueCSR(_ context.Context, csr kubeclient.CSR, cert []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.issued == nil {
		f.issued = map[string][]byte{}
	}
	f.issued[csr.Name] = cert
	return nil
}

func newSigner(t *testing.T, api *fakeAPI) *Signer {
	ca, key := newCA(t, now.Add(10*365*24*time.Hour))
	return &Signer{API: api, CA: ca, Key: key, Now: func() time.Time { return now },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: time.Millisecond}
}

func parseCert(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	require.NotNil(t, b, "no PEM certificate")
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

func TestHandleApprovesAndSignsAJoiningKubelet(t *testing.T) {
	api := &fakeAPI{allowed: map[string]bool{"nodeclient": true}}
	s := newSigner(t, api)
	did, err := s.Handle(context.Background(), bootstrapCSR(t, nil))
	require.NoError(t, err)
	assert.Equal(t, "approved and signed", did)
	assert.Equal(t, []string{"system:bootstrap:abcdef nodeclient"}, api.reviews, "the maker's permission, as the controller manager asks")
	assert.Equal(t, []string{"csr-1 AutoApproved"}, api.approved)

	cert := parseCert(t, api.issued["csr-1"])
	pool := x509.NewCertPool()
	pool.AddCert(s.CA)
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "a client certificate of the cluster CA")
	assert.Equal(t, "system:node:w-1", cert.Subject.CommonName)
	assert.Equal(t, []string{"system:nodes"}, cert.Subject.Organization)
	assert.Equal(t, now.Add(-5*time.Minute), cert.NotBefore)
	assert.Equal(t, now.Add(365*24*time.Hour-5*time.Minute), cert.NotAfter)
	assert.Equal(t, x509.KeyUsageDigitalSignature, cert.KeyUsage)
	assert.False(t, cert.IsCA)
}

func TestHandleLeavesOthersAlone(t *testing.T) {
	for name, csr := range map[string]func(t *testing.T) kubeclient.CSR{
		"another signer": func(t *testing.T) kubeclient.CSR {
			c := bootstrapCSR(t, nil)
			c.SignerName = "kubernetes.io/kube-apiserver-client"
			return c
		},
		"an IP address": func(t *testing.T) kubeclient.CSR {
			return bootstrapCSR(t, func(r *x509.CertificateRequest) { r.IPAddresses = []net.IP{net.IPv4(10, 0, 0, 1)} })
		},
		"another organization": func(t *testing.T) kubeclient.CSR {
			return bootstrapCSR(t, func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:masters"} })
		},
		"not a node's name": func(t *testing.T) kubeclient.CSR {
			return bootstrapCSR(t, func(r *x509.CertificateRequest) { r.Subject.CommonName = "admin" })
		},
		"server usages": func(t *testing.T) kubeclient.CSR {
			c := bootstrapCSR(t, nil)
			c.Usages = []string{"digital signature", "server auth"}
			return c
		},
		"denied": func(t *testing.T) kubeclient.CSR {
			c := bootstrapCSR(t, nil)
			c.Denied = true
			return c
		},
		"already signed": func(t *testing.T) kubeclient.CSR {
			c := bootstrapCSR(t, nil)
			c.Approved, c.Certificate = true, []byte("-----BEGIN CERTIFICATE-----")
			return c
		},
	} {
		t.Run(name, func(t *testing.T) {
			api := &fakeAPI{allowed: map[string]bool{"nodeclient": true, "selfnodeclient": true}}
			did, err := newSigner(t, api).Handle(context.Background(), csr(t))
			require.NoError(t, err)
			assert.Empty(t, did)
			assert.Empty(t, api.reviews)
			assert.Empty(t, api.approved)
			assert.Empty(t, api.issued)
		})
	}
}

func TestHandleRefusedByTheReviewApprovesNothing(t *testing.T) {
	api := &fakeAPI{allowed: map[string]bool{}}
	did, err := newSigner(t, api).Handle(context.Background(), bootstrapCSR(t, nil))
	require.NoError(t, err)
	assert.Empty(t, did)
	assert.Equal(t, []string{"system:bootstrap:abcdef nodeclient"}, api.reviews)
	assert.Empty(t, api.approved)
	assert.Empty(t, api.issued)
}

func TestHandleRenewalAsksSelfNodeClientFirst(t *testing.T) {
	api := &fakeAPI{allowed: map[string]bool{"selfnodeclient": true}}
	csr := bootstrapCSR(t, nil)
	csr.Username = "system:node:w-1"
	did, err := newSigner(t, api).Handle(context.Background(), csr)
	require.NoError(t, err)
	assert.Equal(t, "approved and signed", did)
	assert.Equal(t, []string{"system:node:w-1 selfnodeclient"}, api.reviews)
}

func TestHandleSignsWhatTheControllerManagerApproved(t *testing.T) {
	api := &fakeAPI{}
	csr := bootstrapCSR(t, nil)
	csr.Approved = true
	csr.ExpirationSeconds = 3600
	did, err := newSigner(t, api).Handle(context.Background(), csr)
	require.NoError(t, err)
	assert.Equal(t, "signed", did)
	assert.Empty(t, api.reviews, "approved already: no review")
	cert := parseCert(t, api.issued["csr-1"])
	assert.Equal(t, now.Add(time.Hour), cert.NotAfter, "a short lifetime keeps all of it after now")
}

func TestHandleConflictSignsNothing(t *testing.T) {
	api := &fakeAPI{allowed: map[string]bool{"nodeclient": true}, approveErr: kubeclient.ErrConflict}
	_, err := newSigner(t, api).Handle(context.Background(), bootstrapCSR(t, nil))
	require.ErrorIs(t, err, kubeclient.ErrConflict)
	assert.Empty(t, api.issued)
}

func TestSignLifetime(t *testing.T) {
	for name, tc := range map[string]struct {
		seconds  int64
		caEnds   time.Duration
		notAfter time.Duration
	}{
		"the default":           {0, 10 * 365 * 24 * time.Hour, 365*24*time.Hour - 5*time.Minute},
		"more than the default": {10 * 365 * 24 * 3600, 10 * 365 * 24 * time.Hour, 365*24*time.Hour - 5*time.Minute},
		"below the minimum":     {60, 10 * 365 * 24 * time.Hour, 10 * time.Minute},
		"past the CA":           {0, 30 * 24 * time.Hour, 30 * 24 * time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSigner(t, &fakeAPI{})
			s.CA, s.Key = newCA(t, now.Add(tc.caEnds))
			req, err := parseRequest(request(t, nil))
			require.NoError(t, err)
			p, err := s.Sign(req, clientUsagesNoRSA, tc.seconds)
			require.NoError(t, err)
			assert.Equal(t, now.Add(tc.notAfter), parseCert(t, p).NotAfter)
		})
	}
	s := newSigner(t, &fakeAPI{})
	s.CA, s.Key = newCA(t, now.Add(-time.Minute))
	req, err := parseRequest(request(t, nil))
	require.NoError(t, err)
	_, err = s.Sign(req, clientUsagesNoRSA, 0)
	assert.ErrorContains(t, err, "expired")
}

func TestRunHandlesListedAndWatchedRequests(t *testing.T) {
	listed, watched := bootstrapCSR(t, nil), bootstrapCSR(t, nil)
	watched.Name = "csr-2"
	api := &fakeAPI{allowed: map[string]bool{"nodeclient": true}, list: []kubeclient.CSR{listed}, watch: []kubeclient.CSR{watched}, watched: make(chan struct{})}
	s := newSigner(t, api)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	seen := api.watched
	go func() { done <- s.Run(ctx) }()
	<-seen
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	api.mu.Lock()
	defer api.mu.Unlock()
	assert.Contains(t, api.issued, "csr-1")
	assert.Contains(t, api.issued, "csr-2")
}

func TestLoadCA(t *testing.T) {
	ca, key := newCA(t, now.Add(time.Hour))
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	got, signer, err := LoadCA(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	require.NoError(t, err)
	assert.True(t, got.Equal(ca))
	assert.NotNil(t, signer)
	ec, err := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	_, _, err = LoadCA(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ec}))
	require.NoError(t, err)
	_, _, err = LoadCA(certPEM, []byte("not a key"))
	assert.ErrorContains(t, err, "not PEM")
}
