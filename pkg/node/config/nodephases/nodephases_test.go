package nodephases

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
)

func TestNetworkFiles(t *testing.T) {
	cfg := &machineconfig.Config{Network: machineconfig.Network{Interfaces: []machineconfig.Interface{
		{Name: "en*", DHCP: true, Addresses: []string{"10.0.0.5/24"}, DNS: []string{"9.9.9.9"}},
		{Name: "eth1", Addresses: []string{"192.168.1.2/24"}},
	}}}
	files := networkFiles(cfg)
	require.Len(t, files, 2)
	want0 := "# Written by Terrarium firstboot from the machine config.\n[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n" +
		"Address=10.0.0.5/24\nDNS=9.9.9.9\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n\n[DHCPv4]\nUseHostname=no\nUseNTP=no\nUseDomains=no\n"
	file0 := files[filepath.Join(networkDir, "10-terrarium-0.network")]
	assert.Equal(t, want0, file0)
	file1 := files[filepath.Join(networkDir, "10-terrarium-1.network")]
	assert.Contains(t, file1, "Name=eth1\n")
	assert.NotContains(t, file1, "DHCP")
	assert.NotContains(t, file1, "Gateway=")
	assert.Empty(t, networkFiles(&machineconfig.Config{}), "files for a config without interfaces")
	assert.NotContains(t, file0+file1, "[Route]", "a route to a Service network on a node without a cluster")
}

// On a cluster node the cluster link routes the Service network, so that
// the node itself reaches ClusterIPs without a default route; no other
// link does.
func TestNetworkFilesRouteServicesOnTheClusterLink(t *testing.T) {
	cfg := &machineconfig.Config{
		Network: machineconfig.Network{Interfaces: []machineconfig.Interface{
			{MACAddress: "52:54:00:00:00:10", DHCP: true},
			{MACAddress: "52:54:00:77:00:10", Addresses: []string{"10.77.0.10/24"}},
		}},
		Cluster: &machineconfig.Cluster{NodeIP: "10.77.0.10", ServiceCIDR: "10.96.0.0/12"},
	}
	files := networkFiles(cfg)
	mgmt, link := files[filepath.Join(networkDir, "10-terrarium-0.network")], files[filepath.Join(networkDir, "10-terrarium-1.network")]
	assert.Contains(t, link, "\n[Route]\nDestination=10.96.0.0/12\nPreferredSource=10.77.0.10\n")
	assert.NotContains(t, mgmt, "[Route]", "the other link routes too")
}

func TestAdminName(t *testing.T) {
	assert.Empty(t, AdminName(&machineconfig.Config{}))
	assert.Equal(t, "ops", AdminName(&machineconfig.Config{Admin: &machineconfig.Admin{Name: "ops"}}))
}
