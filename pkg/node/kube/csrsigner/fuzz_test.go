package csrsigner

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// FuzzHandle feeds a certificate signing request and its usages (a
// comma-separated list) as any holder of a bootstrap token may make them,
// to Handle, with an API that allows every maker. What it signs must be a
// kubelet's client certificate of the request's subject: organization
// system:nodes only, a system:node: name, no alternative names, client
// authentication only. Errors come only from a request that does not parse.
func FuzzHandle(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"), "digital signature,client auth")
	f.Add([]byte("not PEM"), "client auth")
	f.Fuzz(func(t *testing.T, request []byte, usages string) {
		api := &fakeAPI{allowed: map[string]bool{"nodeclient": true, "selfnodeclient": true}}
		s := newSigner(t, api)
		csr := kubeclient.CSR{Name: "csr-1", SignerName: KubeletClientSigner, Request: request,
			Usages: strings.Split(usages, ","), Username: "system:bootstrap:abcdef"}
		did, err := s.Handle(context.Background(), csr)
		if err != nil {
			if did != "" || len(api.issued) > 0 {
				t.Fatalf("failed (%v) but did %q", err, did)
			}
			if _, perr := parseRequest(request); perr == nil {
				t.Fatalf("a request that parses failed: %v", err)
			}
			return
		}
		p, ok := api.issued["csr-1"]
		if !ok {
			return
		}
		req, err := parseRequest(request)
		if err != nil {
			t.Fatalf("signed a request that does not parse: %v", err)
		}
		cert := parseCert(t, p)
		if cert.Subject.String() != req.Subject.String() {
			t.Fatalf("signed %q for a request of %q", cert.Subject, req.Subject)
		}
		if !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) || !strings.HasPrefix(cert.Subject.CommonName, "system:node:") {
			t.Fatalf("signed a certificate of %q", cert.Subject)
		}
		if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses)+len(cert.URIs) > 0 {
			t.Fatalf("signed alternative names")
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.IsCA {
			t.Fatalf("signed usages %v (CA %t)", cert.ExtKeyUsage, cert.IsCA)
		}
	})
}

// FuzzHandleServing feeds a serving certificate request, its usages (a
// comma-separated list) and its maker's user name, as any node's
// credential may make them, to Handle, with the API's one Node w-1
// (10.77.0.20). What it approves and signs must be w-1's own request
// for no name and no address but w-1's: made by system:node:w-1, for
// common name system:node:w-1 in organization system:nodes, with DNS name
// w-1 and IP address 10.77.0.20 at most, for serving only. Anything else
// is refused (ErrRefused), and nothing is approved.
func FuzzHandleServing(f *testing.F) {
	f.Add([]byte("not PEM"), "digital signature,server auth", "system:node:w-1")
	f.Fuzz(func(t *testing.T, request []byte, usages, user string) {
		api := servingAPI()
		s := newSigner(t, api)
		csr := kubeclient.CSR{Name: "csr-s", SignerName: KubeletServingSigner, Request: request,
			Usages: strings.Split(usages, ","), Username: user, Groups: []string{"system:nodes"}}
		did, err := s.Handle(context.Background(), csr)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("failed without a refusal: %v", err)
			}
			if did != "" || len(api.approved) > 0 || len(api.issued) > 0 {
				t.Fatalf("refused (%v) but did %q", err, did)
			}
			return
		}
		p, ok := api.issued["csr-s"]
		if !ok {
			t.Fatalf("neither refused nor signed (did %q)", did)
		}
		if user != "system:node:w-1" {
			t.Fatalf("signed a request made by %q", user)
		}
		cert := parseCert(t, p)
		if cert.Subject.CommonName != "system:node:w-1" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
			t.Fatalf("signed a certificate of %q", cert.Subject)
		}
		for _, n := range cert.DNSNames {
			if !strings.EqualFold(n, "w-1") {
				t.Fatalf("signed DNS name %q", n)
			}
		}
		for _, ip := range cert.IPAddresses {
			if !ip.Equal(net.ParseIP("10.77.0.20")) {
				t.Fatalf("signed IP address %s", ip)
			}
		}
		if len(cert.DNSNames)+len(cert.IPAddresses) == 0 || len(cert.EmailAddresses)+len(cert.URIs) > 0 {
			t.Fatalf("signed names %v %v %v %v", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses, cert.URIs)
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || cert.IsCA {
			t.Fatalf("signed usages %v (CA %t)", cert.ExtKeyUsage, cert.IsCA)
		}
	})
}
