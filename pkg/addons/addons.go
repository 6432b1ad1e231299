// Package addons renders the cluster add-ons that firstboot applies and
// kubeadm does not: the pod network (flannel, from the bundle's image and
// our CNI plugin in the slot).
package addons

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/netip"
	"text/template"
)

// DefaultFlannelImage is used when the bundle names none.
const DefaultFlannelImage = "docker.io/flannel/flannel:v0.28.10"

// FlannelConflist is the CNI configuration of every node: our flannel
// plugin (in /usr/lib/cni) reads flanneld's lease and delegates to bridge
// and host-local; portmap serves hostPorts.
const FlannelConflist = `{
  "name": "cbr0",
  "cniVersion": "1.0.0",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        "hairpinMode": true,
        "isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    }
  ]
}
`

//go:embed flannel.yaml.tmpl
var flannelTemplate string

// FlannelInput are the manifest's settings.
type FlannelInput struct {
	PodCIDR string
	Image   string
	// APIPort is the node-local API balancer's port on 127.0.0.1; 0
	// leaves flannel on the kubernetes Service (through kube-proxy).
	APIPort int
}

// Flannel renders flannel's manifest (namespace, RBAC, configuration and
// the DaemonSet).
func Flannel(in FlannelInput) ([]byte, error) {
	if _, err := netip.ParsePrefix(in.PodCIDR); err != nil {
		return nil, fmt.Errorf("flannel: pod CIDR %q: %w", in.PodCIDR, err)
	}
	if in.Image == "" {
		in.Image = DefaultFlannelImage
	}
	t, err := template.New("flannel").Option("missingkey=error").Parse(flannelTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, in); err != nil {
		return nil, fmt.Errorf("render flannel manifest: %w", err)
	}
	return b.Bytes(), nil
}
