// Package addons renders the cluster add-ons that firstboot applies and
// kubeadm does not: the pod network (flannel, from the bundle's image and
// our CNI plugin in the slot), NetworkPolicy's enforcement
// (kube-network-policies, from the bundle's image), CoreDNS's air-gapped
// configuration, and what workloads get (docs/workloads.md): the default
// StorageClass (local-path-provisioner), the resource metrics API
// (metrics-server) and LoadBalancer addresses (MetalLB), each from the
// bundle's images.
package addons

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/netip"
	"strings"
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

// CoreDNSConfig is the coredns ConfigMap (kube-system) an init node creates
// before kubeadm's CoreDNS add-on phase, which keeps a Corefile it finds
// rather than writing its own.
//
// kubeadm's Corefile forwards names outside the cluster to the resolvers
// of /etc/resolv.conf and runs the loop plugin. An air-gapped node has no
// upstream: its pods' resolv.conf names a loopback address where nothing
// answers, and inside CoreDNS's own pod that address is CoreDNS itself (it
// listens on :53 on every address), so the loop plugin stops CoreDNS at
// start ("Loop detected", make e2e) and it never becomes ready. This
// Corefile is kubeadm's without forward and loop: names in the cluster
// domain and reverse zones resolve, other names fail at once (SERVFAIL)
// and no query leaves the node.
func CoreDNSConfig(dnsDomain string) ([]byte, error) {
	if dnsDomain == "" || strings.ContainsAny(dnsDomain, " \t\n{}") {
		return nil, fmt.Errorf("coredns: DNS domain %q is not a domain name", dnsDomain)
	}
	return []byte(strings.ReplaceAll(coreDNSConfig, "DOMAIN", dnsDomain)), nil
}

const coreDNSConfig = `# Written by Terrarium firstboot: CoreDNS for an air-gapped cluster (no
# upstream resolvers: names outside the cluster fail at once).
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health {
           lameduck 5s
        }
        ready
        kubernetes DOMAIN in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        prometheus :9153
        cache 30 {
           disable success DOMAIN
           disable denial DOMAIN
        }
        reload
        loadbalance
    }
`

// Upgrades is the manifest an init node applies, and every control plane
// again before it starts a rollout, so that every node can read its
// cluster's upgrade record (pkg/node/kube/rollout) with its kubelet's
// credentials: the record's ConfigMap, created empty, and the right to
// get it, not to write it (a control plane writes it as the cluster's
// admin). Each node's own status object and rights are
// NodeUpgradeStatus's.
//
//go:embed upgrades.yaml
var Upgrades []byte
