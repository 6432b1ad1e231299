package addons

import (
	"bytes"
	_ "embed"
	"fmt"
	"text/template"
)

// DefaultNetworkPolicyImage is used when the bundle names none.
const DefaultNetworkPolicyImage = "registry.k8s.io/networking/kube-network-policies:v0.8.0"

//go:embed kube-network-policies.yaml.tmpl
var networkPolicyTemplate string

// NetworkPolicyInput are the settings of kube-network-policies' manifest.
type NetworkPolicyInput struct {
	Image string
	// APIPort is the node-local API balancer's port on 127.0.0.1; 0
	// leaves the controller on the kubernetes Service (through
	// kube-proxy).
	APIPort int
}

// NetworkPolicy renders the manifest of kube-network-policies, SIG
// Network's NetworkPolicy controller, which enforces every NetworkPolicy
// on every node (flannel enforces none): its service account, its
// read-only rights and its DaemonSet in kube-system, a namespace Pod
// Security exempts (kubeadmconfig.PodSecurityExemptNamespaces).
func NetworkPolicy(in NetworkPolicyInput) ([]byte, error) {
	if in.Image == "" {
		in.Image = DefaultNetworkPolicyImage
	}
	t, err := template.New("kube-network-policies").Option("missingkey=error").Parse(networkPolicyTemplate)
	if err != nil {
		return nil, fmt.Errorf("parse kube-network-policies manifest: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, in); err != nil {
		return nil, fmt.Errorf("render kube-network-policies manifest: %w", err)
	}
	return b.Bytes(), nil
}
