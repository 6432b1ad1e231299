package qemutests

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
	"github.com/terrarium-os/terrarium/pkg/testvm/testvolume"
)

// channel is one platform's config channel: the medium a user of that
// platform attaches, and what the node must make of it.
type channel struct {
	name string
	// medium makes the disk in dir, for a machine with NIC mac whose
	// admin holds key.
	medium func(t *testing.T, dir, mac, key string) qemu.Disk
	// hostname, source (a part of the status's "enrolled") and address
	// (a static address the node must carry; "" for DHCP) are expected.
	hostname, source, address string
}

// channels are the platforms' own config channels, in data; one launcher
// boots each.
var channels = []channel{
	{
		name: "NoCloud on FAT, a #cloud-config",
		medium: func(t *testing.T, dir, _, key string) qemu.Disk {
			return rawDisk(testvolume.FAT(t, dir, "CIDATA", map[string]string{
				"meta-data": "instance-id: i-0001\nlocal-hostname: nocloud-fat\n",
				"user-data": "#cloud-config\nusers:\n  - name: admin\n    ssh_authorized_keys: [\"" + key + "\"]\n",
			}), qemu.BusUSB)
		},
		hostname: "nocloud-fat", source: "CIDATA",
	},
	{
		name: "NoCloud on ISO 9660, network-config v2 with a static address",
		medium: func(t *testing.T, dir, mac, key string) qemu.Disk {
			return rawDisk(testvolume.ISO(t, dir, "cidata", map[string]string{
				"meta-data": "instance-id: i-0002\nlocal-hostname: nocloud-iso\n",
				"user-data": "#cloud-config\nusers:\n  - name: admin\n    ssh_authorized_keys: [\"" + key + "\"]\n",
				"network-config": "version: 2\nethernets:\n  mgmt:\n    match: {macaddress: \"" + mac + "\"}\n" +
					"    addresses: [10.0.2.42/24]\n    gateway4: 10.0.2.2\n",
			}), qemu.BusVirtio)
		},
		hostname: "nocloud-iso", source: "cidata", address: "10.0.2.42/24",
	},
	{
		name: "OpenStack config drive, network_data.json with a static address",
		medium: func(t *testing.T, dir, mac, key string) qemu.Disk {
			return rawDisk(testvolume.ISO(t, dir, "config-2", map[string]string{
				"openstack/latest/meta_data.json": `{"uuid": "83679162-1378-4288-a2d4-70e13ec132aa", "hostname": "openstack-1.novalocal", "name": "openstack-1",
"public_keys": {"ops": "` + key + `"}}`,
				"openstack/latest/network_data.json": `{"links": [{"id": "tap0", "type": "ovs", "ethernet_mac_address": "` + mac + `"}],
"networks": [{"id": "network0", "type": "ipv4", "link": "tap0", "ip_address": "10.0.2.43", "netmask": "255.255.255.0",
"routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.2.2"}]}]}`,
			}), qemu.BusVirtio)
		},
		hostname: "openstack-1", source: "config-2", address: "10.0.2.43/24",
	},
	{
		name: "vSphere OVF environment on a CD-ROM, hand-typed properties",
		medium: func(t *testing.T, dir, _, key string) qemu.Disk {
			return rawDisk(testvolume.ISO(t, dir, "OVF ENV", map[string]string{
				"ovf-env.xml": ovfEnv(map[string]string{"terrarium.hostname": "vsphere-1", "terrarium.ssh-key": key}),
			}), qemu.BusCDROM)
		},
		hostname: "vsphere-1", source: "OVF environment",
	},
	{
		name: "vSphere OVF environment on a CD-ROM, a whole machine config",
		medium: func(t *testing.T, dir, _, key string) qemu.Disk {
			cfg := adminConfig("vsphere-2", key, "")
			return rawDisk(testvolume.ISO(t, dir, "OVF ENV", map[string]string{
				"ovf-env.xml": ovfEnv(map[string]string{"terrarium.config": base64.StdEncoding.EncodeToString([]byte(cfg))}),
			}), qemu.BusCDROM)
		},
		hostname: "vsphere-2", source: "terrarium.config",
	},
}

// rawDisk attaches a config medium read-only on bus.
func rawDisk(path string, bus qemu.Bus) qemu.Disk {
	return qemu.Disk{ID: "config", Path: path, Format: "raw", ReadOnly: true, Bus: bus}
}

// ovfEnv is an OVF environment document as vSphere writes it on the ISO
// transport's CD.
func ovfEnv(props map[string]string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"
    xmlns:ve="http://www.vmware.com/schema/ovfenv" oe:id="" ve:vCenterId="vm-42">
  <PlatformSection><Kind>VMware ESXi</Kind><Version>8.0.3</Version><Vendor>VMware, Inc.</Vendor><Locale>en</Locale></PlatformSection>
  <PropertySection>
`)
	for _, k := range sortedKeys(props) {
		fmt.Fprintf(&b, "    <Property oe:key=%q oe:value=%q/>\n", k, props[k])
	}
	b.WriteString("  </PropertySection>\n</Environment>\n")
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// TestConfigChannels: the default image enrolls from each platform's own
// config channel (NoCloud on FAT and ISO 9660, an OpenStack config drive,
// vSphere's OVF environment CD), with the hostname, admin and addresses it
// says, and no packet leaves the test network.
func TestConfigChannels(t *testing.T) {
	image := fixture(t, "TERRARIUM_IMAGE")
	for i, c := range channels {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
			defer cancel()
			m := newMachine(t, image)
			m.mac = fmt.Sprintf("52:54:00:00:01:%02x", i+1)
			key := newSSHKey(t)
			port := freePort(t)
			// QEMU forwards to the address its DHCP hands out unless told
			// the guest's static one.
			guest, _, _ := strings.Cut(c.address, "/")
			m.forward = append(m.forward, fmt.Sprintf("tcp:127.0.0.1:%d-%s:22", port, guest))
			media := filepath.Join(m.dir, "media")
			require.NoError(t, os.MkdirAll(media, 0o755))
			vm := m.boot(ctx, c.medium(t, media, m.mac, key.authorized))
			s := expectStatus(ctx, t, vm, "provisioned", "failed")
			require.Equal(t, "provisioned", s.State, "%+v", s)
			assert.Equal(t, c.hostname, s.Hostname)
			assert.Contains(t, s.Enrolled, c.source)
			if c.address != "" {
				has := func(a string) bool { return strings.HasPrefix(a, c.address+" ") }
				assert.True(t, slices.ContainsFunc(s.Addresses, has), "addresses %v, want %s", s.Addresses, c.address)
			}
			ssh := dialSSH(ctx, t, port, key)
			got, err := ssh.read("hostname")
			require.NoError(t, err)
			assert.Equal(t, c.hostname, strings.TrimSpace(got), "the admin's key works and the hostname is set")
			require.NoError(t, vm.Quit(ctx))
			checkCapture(t, m.capture, testSubnet)
			t.Logf("%s: provisioned as %s, enrolled %s", c.name, s.Hostname, s.Enrolled)
		})
	}
}
