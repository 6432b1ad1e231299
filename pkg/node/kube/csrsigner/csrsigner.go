// Package csrsigner approves and signs kubelets' certificate requests on
// control planes: their client certificates while the cluster forms,
// before the controller manager can, and their serving certificates,
// which nothing else in a kubeadm cluster approves.
//
// A joining kubelet asks for its client certificate with a
// CertificateSigningRequest made with the node's bootstrap token. The
// controller manager approves it (after a SubjectAccessReview of its
// maker) and signs it with the cluster CA, but only once every one of its
// controllers is built and their caches synced: on an emulated init node
// that comes tens of seconds after the worker's request, all of it on the
// way to every Node Ready (make bench-cluster, docs/benchmarks.md). The
// init node holds the cluster CA anyway (the controller manager signs
// with its key), so its firstboot does the same two steps with the same
// rules as soon as the request exists: the request's content as the
// controller manager's approver recognizes a kubelet's client
// certificate, the same
// SubjectAccessReview of its maker, and a certificate as its signer makes
// (lifetime, backdating, usages). k3s's server likewise signs its agents'
// kubelet certificates itself. Whichever of the two comes first does each
// step; the other finds it done (or its update conflicts) and leaves the
// request alone.
//
// A kubelet with serverTLSBootstrap asks for its serving certificate
// (signer kubernetes.io/kubelet-serving) once its Node has addresses, and
// serves nothing until it has one: the API server, which checks kubelets'
// certificates against the cluster CA (--kubelet-certificate-authority),
// reaches it for logs, exec and port-forward only then. The controller
// manager signs such a request once approved, but approves none: the
// signer approves one when its maker is the node it names
// (system:node:<name>, in group system:nodes) and every name and address
// it asks for is that node's own (its name, and the addresses its Node
// reports), and signs it as the controller manager would. Any other
// serving request is refused, with the reason in the log, and left to an
// administrator (kubectl certificate approve).
package csrsigner

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// The signer names of kubelets' client and serving certificates.
const (
	KubeletClientSigner  = "kubernetes.io/kube-apiserver-client-kubelet"
	KubeletServingSigner = "kubernetes.io/kubelet-serving"
)

// ErrRefused is a kubelet serving certificate request the signer does not
// approve; the error says why.
var ErrRefused = errors.New("refused")

// The controller manager's signing policy (kube-controller-manager's
// --cluster-signing-duration default, its signer's backdating).
const (
	// DefaultDuration is a certificate's lifetime when its request asks
	// for none (or for more).
	DefaultDuration = 365 * 24 * time.Hour
	minDuration     = 10 * time.Minute
	backdate        = 5 * time.Minute
	// short certificates keep their whole lifetime after now.
	short = 8 * time.Hour
)

// API is what the signer asks of the API server (kubeclient.Client).
type API interface {
	CSRs(ctx context.Context) ([]kubeclient.CSR, string, error)
	WatchCSRs(ctx context.Context, rv string, fn func(kubeclient.CSR)) (string, error)
	CanCreateCSRs(ctx context.Context, csr kubeclient.CSR, subresource string) (bool, error)
	ApproveCSR(ctx context.Context, csr kubeclient.CSR, reason, message string) (kubeclient.CSR, error)
	IssueCSR(ctx context.Context, csr kubeclient.CSR, certPEM []byte) error
	// Node reads the Node a serving certificate request names.
	Node(ctx context.Context, name string) (kubeclient.Node, error)
}

var _ API = (*kubeclient.Client)(nil)

// Signer approves and signs kubelets' client and serving certificate
// requests, one at a time (Run and Pass are not to run at once).
type Signer struct {
	API API
	// CA and Key are the cluster CA's certificate and key.
	CA  *x509.Certificate
	Key crypto.Signer
	// Now is the clock; Log hears of each request decided.
	Now func() time.Time
	Log *slog.Logger
	// Retry is the pause after a failed list or watch.
	Retry time.Duration

	// refused are the requests whose refusal was logged, by name: the
	// resource version logged. A pending request is seen again at every
	// Pass until its kubelet gives up on it; it is logged once.
	refused map[string]string
}

// Run handles every request there is and every one added, until ctx ends.
func (s *Signer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		list, rv, err := s.API.CSRs(ctx)
		if err != nil {
			s.Log.Warn("kubelet certificates: list requests", "err", err)
			if !s.pause(ctx) {
				break
			}
			continue
		}
		for _, csr := range list {
			s.handleLogged(ctx, csr)
		}
		for ctx.Err() == nil {
			next, err := s.API.WatchCSRs(ctx, rv, func(csr kubeclient.CSR) { s.handleLogged(ctx, csr) })
			rv = next
			if errors.Is(err, kubeclient.ErrGone) {
				break // list again
			}
			if err != nil && ctx.Err() == nil {
				s.Log.Warn("kubelet certificates: watch requests", "err", err)
				if !s.pause(ctx) {
					break
				}
			}
		}
	}
	return ctx.Err()
}

// Pass handles every request there is now, once: the slow way of a
// signer that runs for good (AdmitNodes in kubeadmflow), where a watch
// renewed every few seconds would cost the API server a request, and its
// audit log a line, for requests that come a few times a year.
func (s *Signer) Pass(ctx context.Context) error {
	list, _, err := s.API.CSRs(ctx)
	if err != nil {
		return fmt.Errorf("kubelet certificates: %w", err)
	}
	for _, csr := range list {
		s.handleLogged(ctx, csr)
	}
	return nil
}

func (s *Signer) pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(s.Retry):
		return true
	}
}

func (s *Signer) handleLogged(ctx context.Context, csr kubeclient.CSR) {
	did, err := s.Handle(ctx, csr)
	switch {
	case errors.Is(err, ErrRefused) && s.refused[csr.Name] == csr.ResourceVersion:
	case errors.Is(err, ErrRefused):
		if s.refused == nil {
			s.refused = map[string]string{}
		}
		s.refused[csr.Name] = csr.ResourceVersion
		s.Log.Warn("kubelet certificates: request refused; kubectl certificate approve it if it is right", "request", csr.Name, "signer", csr.SignerName, "user", csr.Username, "reason", err)
	case err != nil && !errors.Is(err, kubeclient.ErrConflict) && ctx.Err() == nil:
		s.Log.Warn("kubelet certificates: request not signed", "request", csr.Name, "signer", csr.SignerName, "err", err)
	case did != "":
		s.Log.Info("kubelet certificates: "+did, "request", csr.Name, "signer", csr.SignerName, "user", csr.Username)
	}
}

// Handle decides one request: approves a kubelet's client certificate
// request its maker may make, or a kubelet's serving certificate request
// for its own node's names and addresses, signs it once approved, and
// says what it did ("" for nothing). A serving request it does not
// approve is ErrRefused, saying why. A request changed meanwhile (by the
// controller manager) is ErrConflict: its next event decides again.
func (s *Signer) Handle(ctx context.Context, csr kubeclient.CSR) (string, error) {
	if len(csr.Certificate) > 0 || csr.Denied || csr.Failed {
		return "", nil
	}
	switch csr.SignerName {
	case KubeletClientSigner:
		return s.handleClient(ctx, csr)
	case KubeletServingSigner:
		return s.handleServing(ctx, csr)
	}
	return "", nil
}

// handleClient decides a kubelet client certificate request.
func (s *Signer) handleClient(ctx context.Context, csr kubeclient.CSR) (string, error) {
	req, err := parseRequest(csr.Request)
	if err != nil {
		return "", err
	}
	if err := kubeletClientRequest(req, csr.Usages); err != nil {
		return "", nil // not ours to decide: the controller manager marks it failed
	}
	did := ""
	if !csr.Approved {
		allowed := false
		// The controller manager's order: a renewal by the node itself,
		// then a request by another (a bootstrap token).
		for _, sub := range subresources(csr, req) {
			ok, err := s.API.CanCreateCSRs(ctx, csr, sub)
			if err != nil {
				return "", err
			}
			if ok {
				allowed = true
				break
			}
		}
		if !allowed {
			return "", nil // left to the controller manager and the admin
		}
		csr, err = s.API.ApproveCSR(ctx, csr, "AutoApproved", "Auto approving kubelet client certificate after SubjectAccessReview (Terrarium firstboot, while the controller manager starts).")
		if err != nil {
			return "", err
		}
		if !csr.Approved || len(csr.Certificate) > 0 {
			return "approved", nil
		}
		did = "approved and "
	}
	return s.issue(ctx, csr, req, did)
}

// issue signs an approved request and sets its certificate; did is what
// was done before ("approved and ").
func (s *Signer) issue(ctx context.Context, csr kubeclient.CSR, req *x509.CertificateRequest, did string) (string, error) {
	cert, err := s.Sign(req, csr.Usages, csr.ExpirationSeconds)
	if err != nil {
		return "", err
	}
	if err := s.API.IssueCSR(ctx, csr, cert); err != nil {
		return "", err
	}
	return did + "signed", nil
}

// subresources are the permissions a request's maker is asked for, in the
// controller manager's order.
func subresources(csr kubeclient.CSR, req *x509.CertificateRequest) []string {
	if csr.Username == req.Subject.CommonName {
		return []string{"selfnodeclient", "nodeclient"}
	}
	return []string{"nodeclient"}
}

// parseRequest reads a PEM certificate request and checks its signature.
func parseRequest(p []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("the request holds no PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse the certificate request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request's signature: %w", err)
	}
	return req, nil
}

// Usages a kubelet client certificate request names: with an RSA key's
// key encipherment, or without.
var (
	clientUsages      = []string{"client auth", "digital signature", "key encipherment"}
	clientUsagesNoRSA = []string{"client auth", "digital signature"}
)

// kubeletClientRequest checks a request as the controller manager
// recognizes a kubelet's client certificate: organization system:nodes
// only, a system:node: name, no alternative names, client usages.
func kubeletClientRequest(req *x509.CertificateRequest, usages []string) error {
	if !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return errors.New("organization is not exactly system:nodes")
	}
	if len(req.DNSNames)+len(req.EmailAddresses)+len(req.IPAddresses)+len(req.URIs) > 0 {
		return errors.New("a kubelet client certificate has no alternative names")
	}
	if !strings.HasPrefix(req.Subject.CommonName, "system:node:") {
		return errors.New(`common name does not start with "system:node:"`)
	}
	set := slices.Compact(slices.Sorted(slices.Values(usages)))
	if !slices.Equal(set, clientUsages) && !slices.Equal(set, clientUsagesNoRSA) {
		return fmt.Errorf("usages %v are not %v", usages, clientUsages)
	}
	return nil
}

// Sign makes the certificate of a kubelet's client or serving request as
// the controller manager's signer does: a random 128-bit serial, the
// request's subject, alternative names and key, its usages, valid from 5
// minutes ago for the lifetime asked (10 minutes to DefaultDuration),
// never past the CA.
func (s *Signer) Sign(req *x509.CertificateRequest, usages []string, expirationSeconds int64) ([]byte, error) {
	now := s.Now()
	ttl := DefaultDuration
	if expirationSeconds > 0 {
		ttl = min(max(time.Duration(expirationSeconds)*time.Second, minDuration), DefaultDuration)
	}
	notAfter := now.Add(ttl - backdate)
	if ttl < short {
		notAfter = now.Add(ttl)
	}
	if notAfter.After(s.CA.NotAfter) {
		notAfter = s.CA.NotAfter
	}
	if !now.Before(s.CA.NotAfter) {
		return nil, fmt.Errorf("the cluster CA expired at %s", s.CA.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: req.Subject,
		DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
		NotBefore: now.Add(-backdate), NotAfter: notAfter,
		BasicConstraintsValid: true,
	}
	for _, u := range usages {
		switch u {
		case "digital signature", "signing":
			tmpl.KeyUsage |= x509.KeyUsageDigitalSignature
		case "key encipherment":
			tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
		case "client auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		case "server auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		}
	}
	// A usage named twice is one usage, as for the controller manager.
	tmpl.ExtKeyUsage = slices.Compact(slices.Sorted(slices.Values(tmpl.ExtKeyUsage)))
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.CA, req.PublicKey, s.Key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", req.Subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// LoadCA reads the cluster CA's PEM certificate and key (PKCS#8, SEC 1 or
// PKCS#1).
func LoadCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil {
		return nil, nil, errors.New("the CA certificate is not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("the CA certificate: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, errors.New("the CA key is not PEM")
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
				return nil, nil, errors.New("the CA key is neither PKCS#8, SEC 1 nor PKCS#1")
			}
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("the CA key cannot sign")
	}
	return ca, signer, nil
}
