package configdrive

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/testvm/testvolume"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/cloudinit"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
)

const (
	key1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINFlyNUTsqromdXvFiJRi1uspgjtFPy0KJbZAqe9/rP3 k1@example"
	key2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID8J7mZi/gxjEEiB1HOIW6PjKWViSnUIzTKLux/S7KGe k2@example"

	// metaJSON and networkJSON are shaped as Nova writes them.
	metaJSON = `{"uuid": "83679162-1378-4288-a2d4-70e13ec132aa", "availability_zone": "nova",
"hostname": "web-1.novalocal", "name": "Web 1", "launch_index": 0, "meta": {"role": "web"},
"public_keys": {"zkey": "` + key2 + `", "mykey": "` + key1 + `"},
"keys": [{"name": "mykey", "type": "ssh", "data": "` + key1 + `"}], "project_id": "p", "devices": []}`
	networkJSON = `{
 "links": [
  {"id": "tap1a81968a-79", "vif_id": "1a81968a-797a-400f-8a80-567f997eb93f", "type": "ovs", "mtu": 1450,
   "ethernet_mac_address": "fa:16:3e:d4:57:ad"},
  {"id": "tap2", "type": "phy", "ethernet_mac_address": "fa:16:3e:00:00:02"},
  {"id": "unused", "type": "phy", "ethernet_mac_address": "fa:16:3e:00:00:03"}
 ],
 "networks": [
  {"id": "network0", "type": "ipv4", "link": "tap1a81968a-79", "ip_address": "10.0.0.5", "netmask": "255.255.255.0",
   "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.0.1"}],
   "network_id": "da5bb487-5193-4a65-a3df-4a0055a8c0d7",
   "services": [{"type": "dns", "address": "10.0.0.2"}]},
  {"id": "network1", "type": "ipv4_dhcp", "link": "tap2", "network_id": "n1"}
 ],
 "services": [{"type": "dns", "address": "8.8.8.8"}, {"type": "dns", "address": "10.0.0.2"}]
}`
	machineYAML = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-7\n" +
		"network:\n  interfaces:\n    - name: en*\n      dhcp: true\n"
)

var volumes = testvolume.Both

func TestFetch(t *testing.T) {
	static := machineconfig.Network{Interfaces: []machineconfig.Interface{
		{MACAddress: "fa:16:3e:d4:57:ad", Addresses: []string{"10.0.0.5/24"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.2", "8.8.8.8"}},
		{MACAddress: "fa:16:3e:00:00:02", DHCP: true},
	}}
	for fsName, mk := range volumes {
		t.Run(fsName, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				label string
				files map[string]string
				want  *machineconfig.Config
			}{
				{
					name:  "meta_data and network_data: static with route and DNS",
					label: Label,
					files: map[string]string{MetaDataFile: metaJSON, NetworkDataFile: networkJSON},
					want: &machineconfig.Config{
						APIVersion: machineconfig.APIVersion, Kind: machineconfig.Kind, Hostname: "web-1", Network: static,
						Admin: &machineconfig.Admin{Name: "admin", SSHAuthorizedKeys: []string{key1, key2}},
					},
				},
				{
					name:  "a cloud-config, no network_data",
					label: LabelUpper,
					files: map[string]string{
						MetaDataFile: `{"uuid": "u", "name": "db"}`,
						UserDataFile: "#cloud-config\nusers: [{name: ops, ssh_authorized_keys: [\"" + key2 + "\"]}]\n",
					},
					want: &machineconfig.Config{
						APIVersion: machineconfig.APIVersion, Kind: machineconfig.Kind, Hostname: "db", Network: cloudinit.DefaultNetwork(),
						Admin: &machineconfig.Admin{Name: "ops", SSHAuthorizedKeys: []string{key2}},
					},
				},
				{
					// docs/operations/openstack.md: a cloud-config and --key-name.
					name:  "a cloud-config and a key pair: the key pair joins the cloud-config's admin",
					label: Label,
					files: map[string]string{
						MetaDataFile: `{"uuid": "u", "hostname": "node-1.novalocal", "public_keys": {"alice": "` + key1 + `"}}`,
						UserDataFile: "#cloud-config\nhostname: node-1\nusers:\n  - default\n  - name: ops\n    ssh_authorized_keys: [\"" + key2 + "\"]\n",
					},
					want: &machineconfig.Config{
						APIVersion: machineconfig.APIVersion, Kind: machineconfig.Kind, Hostname: "node-1", Network: cloudinit.DefaultNetwork(),
						Admin: &machineconfig.Admin{Name: "ops", SSHAuthorizedKeys: []string{key2, key1}},
					},
				},
			} {
				t.Run(tc.name, func(t *testing.T) {
					dir := t.TempDir()
					dev := mk(t, dir, tc.label, tc.files)
					f, err := Provider{Dir: dir}.Fetch(context.Background())
					require.NoError(t, err)
					assert.Equal(t, dev+" (OpenStack config drive)", f.Source)
					assert.Nil(t, f.Signature)
					got, err := machineconfig.Parse("found", f.Config)
					require.NoError(t, err)
					assert.Equal(t, tc.want, got)
				})
			}
		})
	}
}

func TestFetchMachineConfig(t *testing.T) {
	dir := t.TempDir()
	// The machine config says everything itself: network_data.json is not
	// read, and the key pair not added.
	testvolume.ISO(t, dir, Label, map[string]string{MetaDataFile: metaJSON, UserDataFile: machineYAML, NetworkDataFile: "["})
	f, err := Provider{Dir: dir}.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, machineYAML, string(f.Config))
	assert.Nil(t, f.Signature)
}

func TestFetchAbsent(t *testing.T) {
	dir := t.TempDir()
	_, err := Provider{Dir: dir}.Fetch(context.Background())
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "config-2 or CONFIG-2")
	assert.Equal(t, "openstack-config-drive", Provider{}.Name())
}

func TestFetchErrors(t *testing.T) {
	big := strings.Repeat(" ", MaxFileSize+1)
	for _, tc := range []struct {
		name     string
		files    map[string]string
		sentinel error
		want     string
	}{
		{name: "no meta_data.json", files: map[string]string{UserDataFile: machineYAML}, sentinel: ErrNoMetaData},
		{name: "meta_data.json too large", files: map[string]string{MetaDataFile: big}, sentinel: volume.ErrTooLarge, want: "meta_data.json"},
		{name: "user_data too large", files: map[string]string{MetaDataFile: metaJSON, UserDataFile: big}, sentinel: volume.ErrTooLarge, want: "user_data"},
		{name: "network_data.json too large", files: map[string]string{MetaDataFile: metaJSON, NetworkDataFile: big}, sentinel: volume.ErrTooLarge, want: "network_data.json"},
		{name: "garbage meta_data.json", files: map[string]string{MetaDataFile: "{hostname"}, sentinel: cloudinit.ErrMalformed, want: "meta_data.json is malformed"},
		{name: "garbage network_data.json", files: map[string]string{MetaDataFile: metaJSON, NetworkDataFile: "\x00"}, sentinel: cloudinit.ErrMalformed, want: "network_data.json is malformed"},
		{name: "garbage user_data", files: map[string]string{MetaDataFile: metaJSON, UserDataFile: "#cloud-config\n{"}, sentinel: cloudinit.ErrMalformed, want: "cloud-config is malformed"},
		{name: "unsupported cloud-config", files: map[string]string{MetaDataFile: metaJSON, UserDataFile: "#cloud-config\npackages: [x]\n"}, sentinel: cloudinit.ErrUnsupported, want: "cloud-config: packages: not supported"},
		{name: "no name at all", files: map[string]string{MetaDataFile: `{"uuid": "x"}`}, sentinel: cloudinit.ErrNoHostname},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := testvolume.ISO(t, dir, Label, tc.files)
			_, err := Provider{Dir: dir}.Fetch(context.Background())
			require.ErrorIs(t, err, tc.sentinel)
			assert.NotErrorIs(t, err, configsource.ErrAbsent)
			assert.Contains(t, err.Error(), dev)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestFetchUnreadable(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, Label)
	require.NoError(t, os.WriteFile(dev, make([]byte, 1<<20), 0o644))
	_, err := Provider{Dir: dir}.Fetch(context.Background())
	require.Error(t, err)
	assert.NotErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), dev)
}
