package ova_test

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmware/govmomi/ovf"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/image/ova"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/vmware"
)

// TestPropertiesReachTheNode deploys the OVA's properties the way vSphere
// does: the values an admin types go into an OVF environment document
// (govmomi writes it as vSphere does), which the node's vmware config
// source turns into its machine config.
func TestPropertiesReachTheNode(t *testing.T) {
	data, _ := build(t, make([]byte, 1<<20))
	env, err := ovf.Unmarshal(bytes.NewReader(readTar(t, data)[0].data))
	require.NoError(t, err)
	product := env.VirtualSystem.Product[0]

	// deploy returns the OVF environment of a VM whose admin typed values:
	// every declared property, empty unless typed.
	deploy := func(t *testing.T, typed map[string]string) []byte {
		t.Helper()
		e := ovf.Env{EsxID: "vm-42", Platform: &ovf.PlatformSection{Kind: "VMware ESXi", Version: "8.0.3", Vendor: "VMware, Inc.", Locale: "en"}, Property: &ovf.PropertySection{}}
		for _, p := range product.Property {
			key := product.Key(p)
			e.Property.Properties = append(e.Property.Properties, ovf.EnvProperty{Key: key, Value: typed[key]})
			delete(typed, key)
		}
		require.Empty(t, typed, "typed values for properties the OVA does not declare")
		return []byte(e.MarshalManual())
	}

	// The keys are the node's.
	assert.Equal(t, []string{vmware.PropConfig, vmware.PropHostname, vmware.PropAddress, vmware.PropGateway, vmware.PropDNS, vmware.PropSSHKey},
		[]string{ova.PropConfig, ova.PropHostname, ova.PropAddress, ova.PropGateway, ova.PropDNS, ova.PropSSHKey})

	const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICzdJu9IrT/3bOiXh8DEcTLpC6Q4nsN+eFbYvz+TzERy alice@laptop"
	found, err := vmware.FromOVFEnv(deploy(t, map[string]string{
		ova.PropHostname: "node-1",
		ova.PropAddress:  "10.0.0.11/24",
		ova.PropGateway:  "10.0.0.1",
		ova.PropDNS:      "10.0.0.1, 9.9.9.9",
		ova.PropSSHKey:   sshKey,
	}), "guestinfo.ovfEnv")
	require.NoError(t, err)
	cfg, err := machineconfig.Parse("machine.yaml", found.Config)
	require.NoError(t, err)
	assert.Equal(t, "node-1", cfg.Hostname)
	require.Len(t, cfg.Network.Interfaces, 1)
	iface := cfg.Network.Interfaces[0]
	assert.Equal(t, []string{"10.0.0.11/24"}, iface.Addresses)
	assert.Equal(t, "10.0.0.1", iface.Gateway)
	assert.Equal(t, []string{"10.0.0.1", "9.9.9.9"}, iface.DNS)
	require.NotNil(t, cfg.Admin)
	assert.Equal(t, []string{sshKey}, cfg.Admin.SSHAuthorizedKeys)

	// A whole machine config, base64, wins over the typed settings.
	whole, err := vmware.FromOVFEnv(deploy(t, map[string]string{
		ova.PropConfig:   base64.StdEncoding.EncodeToString(found.Config),
		ova.PropHostname: "ignored",
	}), "guestinfo.ovfEnv")
	require.NoError(t, err)
	assert.Equal(t, string(found.Config), string(whole.Config))

	// Hostname only: DHCP.
	dhcp, err := vmware.FromOVFEnv(deploy(t, map[string]string{ova.PropHostname: "node-2"}), "guestinfo.ovfEnv")
	require.NoError(t, err)
	cfg, err = machineconfig.Parse("machine.yaml", dhcp.Config)
	require.NoError(t, err)
	assert.Equal(t, "node-2", cfg.Hostname)
	assert.True(t, cfg.Network.Interfaces[0].DHCP)
}
