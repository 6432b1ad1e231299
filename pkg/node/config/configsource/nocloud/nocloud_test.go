package nocloud

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

	machineYAML = "apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: node-7 # as signed\n"
	cloudConfig = "#cloud-config\nusers:\n  - default\n  - name: ops\n    ssh_authorized_keys: [\"" + key1 + "\"]\n"
	metaData    = "instance-id: iid-local01\nlocal-hostname: web-1.example.com\npublic-keys:\n  - " + key2 + "\n"
	netV2       = "version: 2\nethernets:\n  id0:\n    match: {macaddress: \"52:54:00:12:34:56\"}\n    set-name: eth0\n" +
		"    addresses: [10.0.0.5/24]\n    routes: [{to: default, via: 10.0.0.1}]\n    nameservers: {addresses: [10.0.0.2]}\n"
	netV1DHCP = "version: 1\nconfig:\n  - {type: physical, name: ens3, subnets: [{type: dhcp}]}\n"
)

var volumes = testvolume.Both

func TestFetch(t *testing.T) {
	for fsName, mk := range volumes {
		t.Run(fsName, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				label string
				files map[string]string
				want  *machineconfig.Config
			}{
				{
					name:  "cloud-config, meta-data and a static v2 network",
					label: Label,
					files: map[string]string{UserDataFile: cloudConfig, MetaDataFile: metaData, NetworkConfigFile: netV2},
					want: &machineconfig.Config{
						APIVersion: machineconfig.APIVersion, Kind: machineconfig.Kind, Hostname: "web-1",
						Network: machineconfig.Network{Interfaces: []machineconfig.Interface{{
							MACAddress: "52:54:00:12:34:56", Addresses: []string{"10.0.0.5/24"}, Gateway: "10.0.0.1", DNS: []string{"10.0.0.2"},
						}}},
						Admin: &machineconfig.Admin{Name: "ops", SSHAuthorizedKeys: []string{key1, key2}},
					},
				},
				{
					name:  "meta-data alone and a DHCP v1 network",
					label: LabelLower,
					files: map[string]string{MetaDataFile: "local-hostname: solo\n", NetworkConfigFile: netV1DHCP},
					want: &machineconfig.Config{
						APIVersion: machineconfig.APIVersion, Kind: machineconfig.Kind, Hostname: "solo",
						Network: machineconfig.Network{Interfaces: []machineconfig.Interface{{Name: "ens3", DHCP: true}}},
					},
				},
				{
					name:  "no network-config: DHCP on en*",
					label: Label,
					files: map[string]string{UserDataFile: "#cloud-config\nhostname: plain\n", MetaDataFile: ""},
					want: &machineconfig.Config{
						APIVersion: machineconfig.APIVersion, Kind: machineconfig.Kind, Hostname: "plain",
						Network: cloudinit.DefaultNetwork(),
					},
				},
			} {
				t.Run(tc.name, func(t *testing.T) {
					dir := t.TempDir()
					dev := mk(t, dir, tc.label, tc.files)
					f, err := Provider{Dir: dir}.Fetch(context.Background())
					require.NoError(t, err)
					assert.Equal(t, dev+" (NoCloud)", f.Source)
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
	for fsName, mk := range volumes {
		t.Run(fsName, func(t *testing.T) {
			dir := t.TempDir()
			// meta-data and network-config are not read: broken ones do
			// not matter.
			mk(t, dir, LabelLower, map[string]string{
				UserDataFile: machineYAML, "machine.yaml.sig": "sig", MetaDataFile: "{", NetworkConfigFile: "version: 9",
			})
			f, err := Provider{Dir: dir}.Fetch(context.Background())
			require.NoError(t, err)
			assert.Equal(t, machineYAML, string(f.Config), "byte for byte")
			assert.Equal(t, "sig", string(f.Signature))
		})
	}
}

func TestFetchLabels(t *testing.T) {
	dir := t.TempDir()
	_, err := Provider{Dir: dir}.Fetch(context.Background())
	require.ErrorIs(t, err, configsource.ErrAbsent)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "CIDATA or cidata")

	testvolume.ISO(t, dir, LabelLower, map[string]string{MetaDataFile: "local-hostname: lower\n"})
	testvolume.FAT(t, dir, Label, map[string]string{MetaDataFile: "local-hostname: upper\n"})
	f, err := Provider{Dir: dir}.Fetch(context.Background())
	require.NoError(t, err)
	assert.Contains(t, string(f.Config), "hostname: upper", "CIDATA is looked for first")
	assert.Equal(t, "nocloud", Provider{}.Name())
}

func TestFetchErrors(t *testing.T) {
	big := strings.Repeat("#", MaxFileSize+1)
	for _, tc := range []struct {
		name     string
		files    map[string]string
		sentinel error
		want     string
	}{
		{name: "no user-data, no meta-data", files: map[string]string{NetworkConfigFile: netV1DHCP}, sentinel: ErrNoData},
		{name: "user-data too large", files: map[string]string{UserDataFile: big}, sentinel: volume.ErrTooLarge, want: "user-data"},
		{name: "network-config too large", files: map[string]string{MetaDataFile: "local-hostname: a\n", NetworkConfigFile: big}, sentinel: volume.ErrTooLarge, want: "network-config"},
		{name: "garbage meta-data", files: map[string]string{MetaDataFile: "local-hostname: [\n"}, sentinel: cloudinit.ErrMalformed, want: "meta-data is malformed"},
		{name: "garbage network-config", files: map[string]string{MetaDataFile: "local-hostname: a\n", NetworkConfigFile: "\x00\x01{"}, sentinel: cloudinit.ErrMalformed, want: "network-config is malformed"},
		{name: "unsupported cloud-config", files: map[string]string{UserDataFile: "#cloud-config\nhostname: a\nruncmd: [reboot]\nwrite_files: []\n"}, sentinel: cloudinit.ErrUnsupported, want: "cloud-config: runcmd, write_files: not supported by Terrarium"},
		{name: "unsupported network-config", files: map[string]string{MetaDataFile: "local-hostname: a\n", NetworkConfigFile: "version: 2\nbonds: {}\n"}, sentinel: cloudinit.ErrUnsupported, want: "network-config: bonds"},
		{name: "a signature beside a cloud-config", files: map[string]string{UserDataFile: "#cloud-config\nhostname: a\n", "machine.yaml.sig": "x"}, sentinel: cloudinit.ErrUnsupported, want: "machine.yaml.sig signs"},
		{name: "no hostname", files: map[string]string{UserDataFile: "#cloud-config\n", MetaDataFile: "instance-id: x\n"}, sentinel: cloudinit.ErrNoHostname},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := testvolume.FAT(t, dir, Label, tc.files)
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
