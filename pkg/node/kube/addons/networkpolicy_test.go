package addons

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// daemonSet is what the test reads of the manifest's DaemonSet.
type daemonSet struct {
	Metadata struct{ Name, Namespace string }
	Spec     struct {
		Template struct {
			Spec struct {
				HostNetwork        bool   `yaml:"hostNetwork"`
				PriorityClassName  string `yaml:"priorityClassName"`
				ServiceAccountName string `yaml:"serviceAccountName"`
				Tolerations        []map[string]string
				Containers         []struct {
					Image           string
					Command, Args   []string
					Env             []struct{ Name, Value string }
					SecurityContext struct {
						Privileged   *bool
						Capabilities struct{ Add []string }
					} `yaml:"securityContext"`
				}
				Volumes []struct {
					Name     string
					HostPath struct{ Path string } `yaml:"hostPath"`
				}
			}
		}
	}
}

// documents are the manifest's documents by kind; it checks their kinds
// and order.
func documents(t *testing.T, m []byte) map[string]*yaml.Node {
	t.Helper()
	docs := map[string]*yaml.Node{}
	var kinds []string
	dec := yaml.NewDecoder(strings.NewReader(string(m)))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			break
		}
		var head struct{ Kind string }
		require.NoError(t, n.Decode(&head))
		kinds = append(kinds, head.Kind)
		docs[head.Kind] = &n
	}
	assert.Equal(t, []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}, kinds)
	return docs
}

func TestNetworkPolicy(t *testing.T) {
	m, err := NetworkPolicy(NetworkPolicyInput{Image: "registry.k8s.io/networking/kube-network-policies:v9", APIPort: 7445})
	require.NoError(t, err)
	docs := documents(t, m)

	var ds daemonSet
	require.NoError(t, docs["DaemonSet"].Decode(&ds))
	assert.Equal(t, "kube-system", ds.Metadata.Namespace, "a namespace Pod Security exempts")
	pod := ds.Spec.Template.Spec
	assert.True(t, pod.HostNetwork, "it programs the node's nftables")
	assert.Equal(t, "system-node-critical", pod.PriorityClassName)
	assert.Equal(t, "kube-network-policies", pod.ServiceAccountName)
	assert.Equal(t, []map[string]string{{"operator": "Exists"}}, pod.Tolerations, "every node, control planes too, never evicted")
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.Equal(t, "registry.k8s.io/networking/kube-network-policies:v9", c.Image)
	assert.Equal(t, []string{"/bin/netpol"}, c.Command, "the program's path in our image and upstream's")
	assert.Equal(t, []string{"--hostname-override=$(MY_NODE_NAME)", "--nfqueue-id=98", "--metrics-bind-address=127.0.0.1:9080", "--v=2"}, c.Args)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, map[string]string{"MY_NODE_NAME": "", "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "7445"}, env,
		"the node name from the downward API, the API through the node's balancer")
	require.NotNil(t, c.SecurityContext.Privileged)
	assert.False(t, *c.SecurityContext.Privileged)
	assert.Equal(t, []string{"NET_ADMIN"}, c.SecurityContext.Capabilities.Add)
	require.Len(t, pod.Volumes, 1)
	assert.Equal(t, "/var/run/nri", pod.Volumes[0].HostPath.Path, "containerd's NRI socket, nothing else of the host")

	// Read-only rights: it watches pods, namespaces and policies, and
	// writes nothing.
	var role struct {
		Rules []struct{ APIGroups, Resources, Verbs []string } `yaml:"rules"`
	}
	require.NoError(t, docs["ClusterRole"].Decode(&role))
	for _, r := range role.Rules {
		assert.Equal(t, []string{"list", "watch"}, r.Verbs, "rights on %v", r.Resources)
	}
	var binding struct {
		Subjects []struct{ Kind, Name, Namespace string }
	}
	require.NoError(t, docs["ClusterRoleBinding"].Decode(&binding))
	assert.Equal(t, []struct{ Kind, Name, Namespace string }{{"ServiceAccount", "kube-network-policies", "kube-system"}}, binding.Subjects)

	plain, err := NetworkPolicy(NetworkPolicyInput{})
	require.NoError(t, err)
	assert.NotContains(t, string(plain), "KUBERNETES_SERVICE_HOST", "without a port it uses the Service")
	assert.Contains(t, string(plain), "image: "+DefaultNetworkPolicyImage)
}
