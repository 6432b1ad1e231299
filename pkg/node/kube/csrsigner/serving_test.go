package csrsigner

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// workerNode is the Node of w-1 as its kubelet reports it.
var workerNode = kubeclient.Node{Name: "w-1", Addresses: []kubeclient.NodeAddress{
	{Type: "InternalIP", Address: "10.77.0.20"}, {Type: "Hostname", Address: "w-1"},
}}

// servingCSR is the serving certificate request w-1's kubelet makes
// (its Node's hostname and address), changed by edit.
func servingCSR(t *testing.T, edit func(*x509.CertificateRequest)) kubeclient.CSR {
	return kubeclient.CSR{Name: "csr-s", ResourceVersion: "20", SignerName: KubeletServingSigner,
		Request: request(t, func(r *x509.CertificateRequest) {
			r.DNSNames = []string{"w-1"}
			r.IPAddresses = []net.IP{net.ParseIP("10.77.0.20")}
			if edit != nil {
				edit(r)
			}
		}),
		Usages:   []string{"digital signature", "key encipherment", "server auth"},
		Username: "system:node:w-1", Groups: []string{"system:nodes", "system:authenticated"}}
}

func servingAPI() *fakeAPI {
	return &fakeAPI{nodes: map[string]kubeclient.Node{"w-1": workerNode}}
}

// A node's serving request for its own names and addresses is approved
// without a review and signed: a serving certificate of the cluster CA
// for exactly those names, which the API server accepts
// (--kubelet-certificate-authority).
func TestHandleServingApprovesTheNodesOwn(t *testing.T) {
	for name, edit := range map[string]func(*kubeclient.CSR){
		"as the kubelet asks":                  func(*kubeclient.CSR) {},
		"without key encipherment":             func(c *kubeclient.CSR) { c.Usages = servingUsagesNoRSA },
		"usages named twice, in another order": func(c *kubeclient.CSR) { c.Usages = []string{"server auth", "digital signature", "server auth"} },
	} {
		t.Run(name, func(t *testing.T) {
			api := servingAPI()
			s := newSigner(t, api)
			csr := servingCSR(t, nil)
			edit(&csr)
			did, err := s.Handle(context.Background(), csr)
			require.NoError(t, err)
			assert.Equal(t, "approved and signed", did)
			assert.Empty(t, api.reviews, "the maker is the node itself: no review")
			assert.Equal(t, []string{"csr-s AutoApproved"}, api.approved)

			cert := parseCert(t, api.issued["csr-s"])
			pool := x509.NewCertPool()
			pool.AddCert(s.CA)
			_, err = cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, DNSName: "w-1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			assert.NoError(t, err, "a serving certificate of the cluster CA for w-1")
			assert.Equal(t, "system:node:w-1", cert.Subject.CommonName)
			assert.Equal(t, []string{"w-1"}, cert.DNSNames)
			require.Len(t, cert.IPAddresses, 1)
			assert.True(t, cert.IPAddresses[0].Equal(net.ParseIP("10.77.0.20")))
			assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, cert.ExtKeyUsage)
			assert.False(t, cert.IsCA)
		})
	}
}

// Every other serving request is refused, saying why, and nothing is
// approved or signed.
func TestHandleServingRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		csr  func(t *testing.T) kubeclient.CSR
		why  string
	}{
		{"another node's name", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.DNSNames = []string{"w-1", "w-2"} })
		}, `DNS name "w-2" is not a name of Node w-1`},
		{"a name of the API server", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.DNSNames = []string{"kubernetes.default.svc"} })
		}, `DNS name "kubernetes.default.svc" is not a name of Node w-1`},
		{"an address not the node's", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.IPAddresses = append(r.IPAddresses, net.ParseIP("10.77.0.10")) })
		}, "IP address 10.77.0.10 is not an address of Node w-1"},
		{"made by another node", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, nil)
			c.Username = "system:node:w-2"
			return c
		}, "user system:node:w-2 asks for the serving certificate of system:node:w-1"},
		{"made with a bootstrap token", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, nil)
			c.Username, c.Groups = "system:bootstrap:abcdef", []string{"system:bootstrappers", "system:nodes"}
			return c
		}, "user system:bootstrap:abcdef asks for the serving certificate of system:node:w-1"},
		{"not in group system:nodes", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, nil)
			c.Groups = []string{"system:authenticated"}
			return c
		}, "not in group system:nodes"},
		{"no such Node", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, func(r *x509.CertificateRequest) {
				r.Subject.CommonName, r.DNSNames = "system:node:w-9", []string{"w-9"}
			})
			c.Username = "system:node:w-9"
			return c
		}, "there is no Node w-9"},
		{"no name at all", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.DNSNames, r.IPAddresses = nil, nil })
		}, "needs a DNS name or an IP address"},
		{"an e-mail name", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.EmailAddresses = []string{"w-1@example.com"} })
		}, "no e-mail or URI names"},
		{"a URI name", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.URIs = []*url.URL{{Scheme: "spiffe", Host: "w-1"}} })
		}, "no e-mail or URI names"},
		{"client usages", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, nil)
			c.Usages = []string{"digital signature", "client auth"}
			return c
		}, "usages [digital signature client auth]"},
		{"server and client usages", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, nil)
			c.Usages = []string{"digital signature", "server auth", "client auth"}
			return c
		}, "are not"},
		{"organization system:masters", func(t *testing.T) kubeclient.CSR {
			return servingCSR(t, func(r *x509.CertificateRequest) { r.Subject.Organization = []string{"system:nodes", "system:masters"} })
		}, "organization is not exactly system:nodes"},
		{"a common name without a node", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, func(r *x509.CertificateRequest) { r.Subject.CommonName = "system:node:" })
			c.Username = "system:node:"
			return c
		}, `common name "system:node:" is not`},
		{"not a request", func(t *testing.T) kubeclient.CSR {
			c := servingCSR(t, nil)
			c.Request = []byte("not PEM")
			return c
		}, "no PEM CERTIFICATE REQUEST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := servingAPI()
			did, err := newSigner(t, api).Handle(context.Background(), tc.csr(t))
			require.ErrorIs(t, err, ErrRefused)
			assert.ErrorContains(t, err, tc.why)
			assert.Empty(t, did)
			assert.Empty(t, api.approved)
			assert.Empty(t, api.issued)
		})
	}
}

// A serving request an administrator approved is signed when it passes the
// checks; one that does not is left to the controller manager's signer,
// without a word.
func TestHandleServingApprovedByAnAdministrator(t *testing.T) {
	api := servingAPI()
	csr := servingCSR(t, nil)
	csr.Approved = true
	did, err := newSigner(t, api).Handle(context.Background(), csr)
	require.NoError(t, err)
	assert.Equal(t, "signed", did)
	assert.Empty(t, api.approved)
	assert.Contains(t, api.issued, "csr-s")

	api = servingAPI()
	csr = servingCSR(t, func(r *x509.CertificateRequest) { r.DNSNames = []string{"w-1.plant.example"} })
	csr.Approved = true
	did, err = newSigner(t, api).Handle(context.Background(), csr)
	require.NoError(t, err)
	assert.Empty(t, did)
	assert.Empty(t, api.issued)
}

// An API that cannot say what the Node is decides nothing: the error is
// not a refusal, and the request's next event decides again.
func TestHandleServingWithoutTheNode(t *testing.T) {
	api := servingAPI()
	api.nodeErr = errors.New("connection refused")
	did, err := newSigner(t, api).Handle(context.Background(), servingCSR(t, nil))
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrRefused)
	assert.ErrorContains(t, err, "read Node w-1: connection refused")
	assert.Empty(t, did)
	assert.Empty(t, api.approved)
}

// Pass decides every request listed, once, and logs each refusal with its
// reason.
func TestPassDecidesAndLogsRefusals(t *testing.T) {
	mine, other := servingCSR(t, nil), servingCSR(t, func(r *x509.CertificateRequest) { r.DNSNames = []string{"w-2"} })
	other.Name = "csr-other"
	client := bootstrapCSR(t, nil)
	api := servingAPI()
	api.allowed = map[string]bool{"nodeclient": true}
	api.list = []kubeclient.CSR{mine, other, client}
	s := newSigner(t, api)
	var log bytes.Buffer
	s.Log = slog.New(slog.NewTextHandler(&log, nil))
	require.NoError(t, s.Pass(context.Background()))
	assert.Contains(t, api.issued, "csr-s")
	assert.Contains(t, api.issued, "csr-1", "a client request too")
	assert.NotContains(t, api.issued, "csr-other")
	assert.Contains(t, log.String(), "request refused")
	assert.Contains(t, log.String(), "request=csr-other")
	assert.Contains(t, log.String(), `DNS name \"w-2\" is not a name of Node w-1`)

	// A request still pending at the next pass is not logged again;
	// changed, it is.
	require.NoError(t, s.Pass(context.Background()))
	assert.Equal(t, 1, strings.Count(log.String(), "request=csr-other"), "one refusal, one line")
	api.list[1].ResourceVersion = "21"
	require.NoError(t, s.Pass(context.Background()))
	assert.Equal(t, 2, strings.Count(log.String(), "request=csr-other"))
}
