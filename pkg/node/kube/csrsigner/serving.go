package csrsigner

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// Usages a kubelet serving certificate request names: with an RSA key's
// key encipherment, or without (the kubelet names it with its ECDSA key
// too).
var (
	servingUsages      = []string{"digital signature", "key encipherment", "server auth"}
	servingUsagesNoRSA = []string{"digital signature", "server auth"}
)

// nodeUserPrefix starts the user name, and the common name, of a node.
const nodeUserPrefix = "system:node:"

// handleServing decides a kubelet serving certificate request: approved
// and signed when checkServing finds it the node's own, refused
// (ErrRefused) otherwise. One approved by someone else (an administrator)
// that the checks would refuse is left to the controller manager's signer.
func (s *Signer) handleServing(ctx context.Context, csr kubeclient.CSR) (string, error) {
	req, err := parseRequest(csr.Request)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if err := s.checkServing(ctx, csr, req); err != nil {
		if csr.Approved && errors.Is(err, ErrRefused) {
			return "", nil
		}
		return "", err
	}
	did := ""
	if !csr.Approved {
		csr, err = s.API.ApproveCSR(ctx, csr, "AutoApproved", "Auto approving kubelet serving certificate: its names and addresses are its Node's (Terrarium firstboot).")
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

// checkServing checks a kubelet serving certificate request: one the
// controller manager's signer would sign (kubeletServingRequest), made by
// the node it names, for no name and no address but that node's own
// (servingNamesAreNodes). What does not pass is ErrRefused, saying why;
// an error reading the Node is returned as it is.
func (s *Signer) checkServing(ctx context.Context, csr kubeclient.CSR, req *x509.CertificateRequest) error {
	if err := kubeletServingRequest(req, csr.Usages); err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	name := strings.TrimPrefix(req.Subject.CommonName, nodeUserPrefix)
	if csr.Username != req.Subject.CommonName {
		return fmt.Errorf("%w: user %s asks for the serving certificate of %s: a node asks for its own only", ErrRefused, csr.Username, req.Subject.CommonName)
	}
	if !slices.Contains(csr.Groups, "system:nodes") {
		return fmt.Errorf("%w: user %s is not in group system:nodes", ErrRefused, csr.Username)
	}
	node, err := s.API.Node(ctx, name)
	if errors.Is(err, kubeclient.ErrNotFound) {
		return fmt.Errorf("%w: there is no Node %s", ErrRefused, name)
	}
	if err != nil {
		return fmt.Errorf("read Node %s: %w", name, err)
	}
	if err := servingNamesAreNodes(req, node); err != nil {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return nil
}

// kubeletServingRequest checks a request as the controller manager's
// signer recognizes a kubelet's serving certificate (it marks any other
// failed): organization system:nodes only, a system:node: name with a
// node after it, at least one DNS name or IP address and no other kind
// of alternative name, serving usages.
func kubeletServingRequest(req *x509.CertificateRequest, usages []string) error {
	if !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return errors.New("organization is not exactly system:nodes")
	}
	if name, ok := strings.CutPrefix(req.Subject.CommonName, nodeUserPrefix); !ok || name == "" {
		return fmt.Errorf("common name %q is not %q and a node's name", req.Subject.CommonName, nodeUserPrefix)
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return errors.New("a serving certificate needs a DNS name or an IP address")
	}
	if len(req.EmailAddresses)+len(req.URIs) > 0 {
		return errors.New("a kubelet serving certificate has no e-mail or URI names")
	}
	set := slices.Compact(slices.Sorted(slices.Values(usages)))
	if !slices.Equal(set, servingUsages) && !slices.Equal(set, servingUsagesNoRSA) {
		return fmt.Errorf("usages %v are not %v", usages, servingUsages)
	}
	return nil
}

// servingNamesAreNodes checks that every DNS name a serving request asks
// for is its node's name or one of its Node's host and DNS names, and
// every IP address one of its Node's addresses: what the kubelet itself
// puts in the request (the addresses its Node reports).
func servingNamesAreNodes(req *x509.CertificateRequest, node kubeclient.Node) error {
	names := map[string]bool{strings.ToLower(node.Name): true}
	var ips []net.IP
	for _, a := range node.Addresses {
		ip := net.ParseIP(a.Address)
		switch {
		case ip != nil && (a.Type == "InternalIP" || a.Type == "ExternalIP" || a.Type == "Hostname"):
			ips = append(ips, ip)
		case ip == nil && (a.Type == "Hostname" || a.Type == "InternalDNS" || a.Type == "ExternalDNS"):
			names[strings.ToLower(a.Address)] = true
		}
	}
	for _, n := range req.DNSNames {
		if !names[strings.ToLower(n)] {
			return fmt.Errorf("DNS name %q is not a name of Node %s", n, node.Name)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			return fmt.Errorf("IP address %s is not an address of Node %s", ip, node.Name)
		}
	}
	return nil
}
