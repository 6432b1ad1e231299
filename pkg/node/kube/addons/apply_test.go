package addons

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeclient"
)

// Every add-on manifest is applied in process (kubeclient.ApplyManifest),
// which knows a fixed set of kinds: each manifest must parse, whole.
func TestManifestsApplyInProcess(t *testing.T) {
	flannel, err := Flannel(FlannelInput{PodCIDR: "10.244.0.0/16", APIPort: 7445})
	require.NoError(t, err)
	dns, err := CoreDNSConfig("cluster.local")
	require.NoError(t, err)
	netpol, err := NetworkPolicy(NetworkPolicyInput{APIPort: 7445})
	require.NoError(t, err)
	localPath, err := LocalPath(LocalPathInput{VolumesDir: "/var/lib/terrarium/volumes"})
	require.NoError(t, err)
	_, _, metricsIn := testCA(t)
	metrics, err := MetricsServer(metricsIn)
	require.NoError(t, err)
	metallb, pool, err := MetalLB(MetalLBInput{Addresses: []string{"10.77.0.100-10.77.0.120"}})
	require.NoError(t, err)
	for _, tt := range []struct {
		name     string
		manifest []byte
		want     []string
	}{
		{"flannel", flannel, []string{"Namespace kube-flannel", "ServiceAccount kube-flannel/flannel", "ClusterRole flannel",
			"ClusterRoleBinding flannel", "ConfigMap kube-flannel/kube-flannel-cfg", "DaemonSet kube-flannel/kube-flannel-ds"}},
		{"coredns", dns, []string{"ConfigMap kube-system/coredns"}},
		{"kube-network-policies", netpol, []string{"ServiceAccount kube-system/kube-network-policies", "ClusterRole kube-network-policies",
			"ClusterRoleBinding kube-network-policies", "DaemonSet kube-system/kube-network-policies"}},
		{"local-path-provisioner", localPath, []string{"ServiceAccount kube-system/local-path-provisioner",
			"Role kube-system/local-path-provisioner", "RoleBinding kube-system/local-path-provisioner",
			"ClusterRole terrarium:local-path-provisioner", "ClusterRoleBinding terrarium:local-path-provisioner",
			"ConfigMap kube-system/local-path-config", "Deployment kube-system/local-path-provisioner", "StorageClass local-path"}},
		{"metrics-server", metrics, []string{"ServiceAccount kube-system/metrics-server",
			"ClusterRole system:aggregated-metrics-reader", "ClusterRole system:metrics-server",
			"RoleBinding kube-system/metrics-server-auth-reader", "ClusterRoleBinding metrics-server:system:auth-delegator",
			"ClusterRoleBinding system:metrics-server", "Secret kube-system/metrics-server-tls", "Service kube-system/metrics-server",
			"Deployment kube-system/metrics-server", "APIService v1beta1.metrics.k8s.io"}},
		{"metallb-crds", MetalLBCRDs, []string{"CustomResourceDefinition bfdprofiles.metallb.io", "CustomResourceDefinition bgpadvertisements.metallb.io",
			"CustomResourceDefinition bgppeers.metallb.io", "CustomResourceDefinition communities.metallb.io",
			"CustomResourceDefinition ipaddresspools.metallb.io", "CustomResourceDefinition l2advertisements.metallb.io",
			"CustomResourceDefinition servicel2statuses.metallb.io"}},
		{"metallb", metallb, []string{"Namespace metallb-system", "ServiceAccount metallb-system/controller", "ServiceAccount metallb-system/speaker",
			"Role metallb-system/controller", "Role metallb-system/pod-lister", "ClusterRole metallb-system:controller", "ClusterRole metallb-system:speaker",
			"RoleBinding metallb-system/controller", "RoleBinding metallb-system/pod-lister",
			"ClusterRoleBinding metallb-system:controller", "ClusterRoleBinding metallb-system:speaker",
			"Deployment metallb-system/controller", "DaemonSet metallb-system/speaker"}},
		{"metallb-pool", pool, []string{"IPAddressPool metallb-system/terrarium", "L2Advertisement metallb-system/terrarium"}},
		{"upgrades", Upgrades, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := kubeclient.ParseManifest(tt.manifest)
			require.NoError(t, err)
			require.NotEmpty(t, objs)
			if tt.want == nil {
				return
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.String())
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
