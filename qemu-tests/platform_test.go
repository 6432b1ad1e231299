package qemutests

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
	"github.com/terrarium-os/terrarium/pkg/testvm/testvolume"
)

// channel is one platform's config channel: the medium a user of that
// platform attaches, and what the node must make of it.
type channel struct {
	name string
	// iso boots the build's ISO on this bus ("cdrom" or "usb") beside an
	// empty disk, instead of the disk image.
	iso string
	// install: the ISO installs onto the empty disk and reboots into it;
	// the checks run on the installed system, which is then rebooted
	// with the ISO still first in the boot order: the ISO hands the boot
	// over to the disk.
	install bool
	// tpm gives the machine a TPM 2.0 (machine.tpm).
	tpm bool
	// bios boots the machine with SeaBIOS (machine.bios), as Proxmox and
	// OpenStack do unless told UEFI: GRUB boots the disk image, and its
	// first try is counted in the entry's name.
	bios bool
	// installRefused marks an install the node must refuse: the console
	// must match it, the status say failed, and the disk stay empty.
	installRefused string
	// disk "ova" boots the disk of the build's OVA (its streamOptimized
	// VMDK, as vSphere imports it) instead of the qcow2.
	disk string
	// medium makes the disk in dir, for a machine with NIC mac whose
	// admin holds key; nil attaches none.
	medium func(t *testing.T, dir, mac, key string) qemu.Disk
	// fwCfg makes QEMU fw_cfg entries in dir; nil passes none.
	fwCfg func(t *testing.T, dir, key string) []qemu.FwCfg
	// hostname, source (a part of the status's "enrolled") and address
	// (a static address the node must carry; "" for DHCP) are expected.
	hostname, source, address string
	// user logs in with the key ("admin" when empty); check asks the
	// node over SSH for what else the channel must have applied.
	user  string
	check func(t *testing.T, ssh *sshClient)
	// refused marks a bad input: the console must match it (a regexp
	// naming the source, file and field) and the node stay
	// config-invalid with nothing applied.
	refused string
	// then are more bad inputs handed in turn to the same waiting node:
	// the medium before is pulled out, the next plugged in, and each is
	// refused as refused is. One boot shows several channels' refusals.
	then []badMedium
	// e2e: the case runs in TestConfigChannelsMore (make e2e-node), not
	// in make test: a variant of a channel make test boots already.
	e2e bool
}

// badMedium is a bad input a waiting node is handed while it runs.
type badMedium struct {
	// medium makes the disk in dir (its ID is set by the test); refused
	// is what the console must say of it.
	medium  func(t *testing.T, dir string) qemu.Disk
	refused string
}

// channels are the platforms' own config channels, in data; one launcher
// boots each.
var channels = []channel{
	{
		// The stick is what a Flatcar site brings: its Container Linux
		// Config beside our machine config, made into a config disk by
		// `imagebuild config disk --ignition` (docs/migrating-from-
		// flatcar-and-fcos.md).
		name: "the ISO on a CD-ROM under SeaBIOS (GRUB's El Torito image), live: STATE in RAM, a TERRA-CONFIG stick with a Container Linux Config: a file, a unit and a user",
		iso:  "cdrom", bios: true,
		medium: func(t *testing.T, dir, _, key string) qemu.Disk {
			machine := write(t, dir, "machine.yaml", adminConfig("live-cd", key, ""))
			clc := write(t, dir, "node.clc.yaml", `passwd:
  users:
    - name: core
      ssh_authorized_keys: ["`+strings.TrimSpace(key)+`"]
storage:
  files:
    - path: /etc/app/hello.txt
      filesystem: root
      mode: 0644
      contents:
        inline: "hello from a container linux config\n"
systemd:
  units:
    - name: app.service
      enabled: true
      contents: |
        [Unit]
        Description=an app from a Container Linux Config
        [Service]
        Type=oneshot
        RemainAfterExit=yes
        ExecStart=/bin/sh -c 'cat /etc/app/hello.txt > /run/app-ran'
        [Install]
        WantedBy=multi-user.target
`)
			return rawDisk(configDisk(t, dir, machine, clc), qemu.BusUSB)
		},
		hostname: "live-cd", source: "TERRA-CONFI",
		check: func(t *testing.T, ssh *sshClient) {
			out, err := ssh.read("findmnt -no FSTYPE " + layout.LiveMediumMount + "; findmnt -no SOURCE,FSTYPE /; findmnt -no SOURCE,FSTYPE " + layout.StateMount)
			require.NoError(t, err, out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 3, out)
			assert.Equal(t, "iso9660", lines[0], "the medium stays mounted")
			assert.Regexp(t, `^/dev/loop\d+\s+squashfs$`, lines[1], "the root is the ISO's squashfs")
			assert.Regexp(t, `^tmpfs\s+tmpfs$`, lines[2], "STATE is in RAM; the empty disk is left for an installer")
			checkApp(t, ssh, "hello from a container linux config")
			checkFirmware(t, ssh, "bios")
		},
	},
	{
		// The same ISO from a CD-ROM under UEFI: El Torito's EFI image.
		name: "the ISO on a CD-ROM under UEFI, live, a machine config from QEMU fw_cfg",
		iso:  "cdrom", e2e: true,
		fwCfg: func(t *testing.T, dir, key string) []qemu.FwCfg {
			return []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: write(t, dir, "machine.yaml", adminConfig("live-cd-uefi", key, ""))}}
		},
		hostname: "live-cd-uefi", source: "QEMU fw_cfg (opt/dev.terrarium/config)",
		check: func(t *testing.T, ssh *sshClient) { checkFirmware(t, ssh, "uefi") },
	},
	{
		name: "NoCloud on FAT, a #cloud-config, under SeaBIOS (as Proxmox boots by default)",
		bios: true,
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
		e2e:  true,
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
		name: "OpenStack config drive, network_data.json with a static address, under SeaBIOS (as Nova boots an image without hw_firmware_type)",
		bios: true,
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
		name: "vSphere: the OVA's disk, its OVF environment on a CD-ROM, hand-typed properties",
		disk: "ova",
		medium: func(t *testing.T, dir, _, key string) qemu.Disk {
			return rawDisk(testvolume.ISO(t, dir, "OVF ENV", map[string]string{
				"ovf-env.xml": ovfEnv(map[string]string{"terrarium.hostname": "vsphere-1", "terrarium.ssh-key": key}),
			}), qemu.BusCDROM)
		},
		hostname: "vsphere-1", source: "OVF environment",
	},
	{
		name: "vSphere OVF environment on a CD-ROM, a whole machine config",
		e2e:  true,
		medium: func(t *testing.T, dir, _, key string) qemu.Disk {
			cfg := adminConfig("vsphere-2", key, "")
			return rawDisk(testvolume.ISO(t, dir, "OVF ENV", map[string]string{
				"ovf-env.xml": ovfEnv(map[string]string{"terrarium.config": base64.StdEncoding.EncodeToString([]byte(cfg))}),
			}), qemu.BusCDROM)
		},
		hostname: "vsphere-2", source: "terrarium.config",
	},
	{
		// The CI engineer's channel: a whole machine config by QEMU's
		// -fw_cfg.
		name: "a machine config from QEMU fw_cfg",
		fwCfg: func(t *testing.T, dir, key string) []qemu.FwCfg {
			return []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: write(t, dir, "machine.yaml", adminConfig("ci-node", key, ""))}}
		},
		hostname: "ci-node", source: "QEMU fw_cfg (opt/dev.terrarium/config)",
	},
	{
		// A Fedora CoreOS user's CI passes its config where CoreOS reads
		// Ignition; the node takes the Butane source as well as the .ign
		// that butane makes of it (raw Ignition on this entry is the
		// refused case below): a file, an enabled unit that runs, a user
		// with a key.
		name: "Butane from QEMU fw_cfg, where CoreOS reads Ignition: a file, a unit and a user",
		fwCfg: func(t *testing.T, dir, key string) []qemu.FwCfg {
			bu := `variant: fcos
version: 1.5.0
passwd:
  users:
    - name: core
      ssh_authorized_keys: ["` + strings.TrimSpace(key) + `"]
      groups: [sudo]
storage:
  files:
    - path: /etc/app/hello.txt
      mode: 0644
      contents:
        inline: "hello from butane\n"
systemd:
  units:
    - name: app.service
      enabled: true
      contents: |
        [Unit]
        Description=an app from Butane
        [Service]
        Type=oneshot
        RemainAfterExit=yes
        ExecStart=/bin/sh -c 'cat /etc/app/hello.txt > /run/app-ran'
        [Install]
        WantedBy=multi-user.target
`
			return []qemu.FwCfg{{Name: "opt/com.coreos/config", File: write(t, dir, "config.bu", bu)}}
		},
		hostname: "terrarium", source: "QEMU fw_cfg (opt/com.coreos/config)", user: "core",
		check: func(t *testing.T, ssh *sshClient) {
			checkApp(t, ssh, "hello from butane")
		},
	},
	{
		name: "bad input: an install target that is the boot medium",
		iso:  "usb",
		fwCfg: func(t *testing.T, dir, key string) []qemu.FwCfg {
			config := adminConfig("installer", key, "install:\n  disk:\n    serial: "+isoSerial+"\n  wipe: true\n")
			return []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: write(t, dir, "machine.yaml", config)}}
		},
		installRefused: `install\.disk \(serial ` + isoSerial + `\) selects /dev/sda \(.*\), the medium this node booted from`,
	},
	{
		// The parsers' every error is a unit test of its source; a boot
		// shows that each source's refusal reaches the console and the
		// status and that nothing is applied, on the buses these media
		// come on (the good cases above show the CD-ROM's).
		name: "bad input: three media handed in turn to one waiting node (NoCloud network-config v2 with an unknown key; an ovf-env.xml that is not XML; an OpenStack meta_data.json that is not JSON)",
		medium: func(t *testing.T, dir, mac, key string) qemu.Disk {
			return rawDisk(testvolume.FAT(t, dir, "CIDATA", map[string]string{
				"meta-data":      "instance-id: i-0003\nlocal-hostname: nocloud-bad\n",
				"user-data":      "#cloud-config\nusers:\n  - name: admin\n    ssh_authorized_keys: [\"" + key + "\"]\n",
				"network-config": "version: 2\nethernets:\n  mgmt:\n    match: {macaddress: \"" + mac + "\"}\n    dhcp4: true\n    frobnicate: yes\n",
			}), qemu.BusUSB)
		},
		refused: `network-config: ethernets\.mgmt\.frobnicate`,
		then: []badMedium{{
			medium: func(t *testing.T, dir string) qemu.Disk {
				return rawDisk(testvolume.ISO(t, dir, "OVF ENV", map[string]string{"ovf-env.xml": "<Environment><PropertySection>"}), qemu.BusUSB)
			},
			refused: `not a valid OVF environment`,
		}, {
			medium: func(t *testing.T, dir string) qemu.Disk {
				return rawDisk(testvolume.ISO(t, dir, "config-2", map[string]string{
					"openstack/latest/meta_data.json": `{"uuid": "83679162", "hostname": `,
				}), qemu.BusVirtio)
			},
			refused: `config drive /dev/\S+: meta_data\.json is malformed`,
		}},
	},
	{
		name: "bad input: an Ignition config that partitions disks",
		e2e:  true,
		fwCfg: func(t *testing.T, dir, _ string) []qemu.FwCfg {
			ign := `{"ignition": {"version": "3.4.0"}, "storage": {"disks": [{"device": "/dev/vda", "wipeTable": true}]}}`
			return []qemu.FwCfg{{Name: "opt/com.coreos/config", File: write(t, dir, "config.ign", ign)}}
		},
		refused: `\$\.storage\.disks: Terrarium does not partition disks`,
	},
}

// ovaDisk extracts the VMDK from an OVA (a tar: the descriptor, the
// manifest, the disk) into a temporary directory.
func ovaDisk(t *testing.T, ova string) string {
	t.Helper()
	f, err := os.Open(ova)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		require.NoError(t, err, "%s holds no .vmdk", ova)
		if !strings.HasSuffix(h.Name, ".vmdk") {
			continue
		}
		p := filepath.Join(t.TempDir(), filepath.Base(h.Name))
		out, err := os.Create(p)
		require.NoError(t, err)
		_, err = io.Copy(out, tr)
		require.NoError(t, err)
		require.NoError(t, out.Close())
		return p
	}
}

// checkApp checks what a channel's Ignition, Butane or Container Linux
// Config made: the file says hello, the unit is enabled and has run (it
// copied the file), and the user core exists.
func checkApp(t *testing.T, ssh *sshClient, hello string) {
	t.Helper()
	out, err := ssh.read("cat /etc/app/hello.txt; systemctl is-enabled app.service; sudo cat /run/app-ran; id -un core")
	require.NoError(t, err, out)
	assert.Equal(t, hello+"\n"+"enabled\n"+hello+"\n"+"core\n", out)
}

// configDisk runs `imagebuild config disk MACHINE --ignition IGN` into
// dir and returns the disk's path.
func configDisk(t *testing.T, dir, machine, ign string) string {
	t.Helper()
	p := filepath.Join(dir, "config.img")
	out, err := exec.Command(filepath.Join(fixture(t, "TERRARIUM_BIN"), "imagebuild"),
		"config", "disk", machine, "--ignition", ign, "-o", p).CombinedOutput()
	require.NoError(t, err, "imagebuild config disk:\n%s", out)
	return p
}

// write writes content to dir/name and returns its path.
func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
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

// TestConfigChannels: the build's media boot each platform's way (the
// disk image, the ISO live from a CD-ROM and installing from a USB stick,
// the OVA's disk) and enroll from each platform's own config channel
// (NoCloud on FAT, an OpenStack config drive, vSphere's OVF environment
// CD, QEMU's fw_cfg with a machine config or a Butane config; a config
// disk made with a Container Linux Config), with the hostname,
// users, files, units and addresses it says;
// a bad input on each is refused by name with nothing applied. No packet
// leaves the test network. Variants of these channels boot in
// TestConfigChannelsMore (make e2e-node).
//
// The cases run two at a time (go test's -parallel, GOMAXPROCS by
// default): a boot keeps one host core busy through the firmware and the
// initramfs and both only from systemd on, so a second boot fills the
// idle core (docs/operations/qemu-ci.md has the figures).
func TestConfigChannels(t *testing.T) {
	t.Parallel()
	runChannels(t, false)
}

// runChannels runs, each in parallel, the channels whose e2e is e2e.
func runChannels(t *testing.T, e2e bool) {
	t.Helper()
	for i, c := range channels {
		if c.e2e != e2e {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runChannel(t, i, c)
		})
	}
}

// runChannel boots c's medium on a machine with the i-th MAC address and
// checks what c says: enrolled and provisioned, or refused.
func runChannel(t *testing.T, i int, c channel) {
	timeout := bootTimeout
	if c.install {
		timeout = 3 * bootTimeout // three boots: live and install, installed, handed over
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var m *machine
	switch {
	case c.iso == "cdrom":
		m = newLiveMachine(t, fixture(t, "TERRARIUM_ISO"), qemu.BusCDROM)
	case c.iso == "usb":
		m = newLiveMachine(t, fixture(t, "TERRARIUM_ISO"), qemu.BusUSB)
	case c.disk == "ova":
		m = newMachine(t, ovaDisk(t, fixture(t, "TERRARIUM_OVA")))
	default:
		m = newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	}
	m.mac = fmt.Sprintf("52:54:00:00:01:%02x", i+1)
	m.tpm = c.tpm
	m.bios = c.bios
	key := newSSHKey(t)
	port := freePort(t)
	// QEMU forwards to the address its DHCP hands out unless told
	// the guest's static one.
	guest, _, _ := strings.Cut(c.address, "/")
	m.forward = append(m.forward, fmt.Sprintf("tcp:127.0.0.1:%d-%s:22", port, guest))
	media := filepath.Join(m.dir, "media")
	require.NoError(t, os.MkdirAll(media, 0o755))
	var disks []qemu.Disk
	if c.medium != nil {
		disks = append(disks, c.medium(t, media, m.mac, key.authorized))
	}
	if c.fwCfg != nil {
		m.fwCfg = c.fwCfg(t, media, key.authorized)
	}
	vm := m.boot(ctx, disks...)

	if c.installRefused != "" {
		expect(ctx, t, vm, `install failed:`)
		said := expect(ctx, t, vm, c.installRefused)
		s := expectStatus(ctx, t, vm, "failed")
		assert.Contains(t, s.Message, "the medium this node booted from")
		require.NoError(t, vm.Quit(ctx))
		raw := filepath.Join(t.TempDir(), "disk.raw")
		run(t, "qemu-img", "convert", "-O", "raw", m.disk, raw)
		head := make([]byte, 1<<20)
		f, err := os.Open(raw)
		require.NoError(t, err)
		_, err = io.ReadFull(f, head)
		_ = f.Close() // read only
		require.NoError(t, err)
		assert.Equal(t, make([]byte, 1<<20), head, "the disk is still empty")
		checkCapture(t, m.capture, testSubnet)
		t.Logf("%s: refused: %s", c.name, said[0])
		return
	}

	if c.refused != "" {
		refuse := func(refused string) {
			expect(ctx, t, vm, `the config is invalid; nothing was applied`)
			said := expect(ctx, t, vm, refused)
			s := expectStatus(ctx, t, vm, "config-invalid")
			assert.Empty(t, s.Hostname, "nothing applied")
			assert.Regexp(t, refused, s.Message, "the status names this medium's problem")
			t.Logf("refused: %s", said[0])
		}
		refuse(c.refused)
		for i, b := range c.then {
			require.NotEmpty(t, disks, "a medium to pull out before the next")
			in := disks[len(disks)-1].ID
			d := b.medium(t, media)
			d.ID = fmt.Sprintf("then%d", i)
			require.NoError(t, vm.UnplugDisk(ctx, in))
			require.NoError(t, vm.HotplugDisk(ctx, d))
			disks = append(disks, d)
			refuse(b.refused)
		}
		require.NoError(t, vm.Quit(ctx))
		journal := m.inspectState().readFile("/terrarium/journal.json")
		assert.NotContains(t, journal, `"applied"`, "a refused config applied something")
		checkCapture(t, m.capture, testSubnet)
		return
	}

	start := time.Now()
	if c.install {
		expect(ctx, t, vm, `installed Terrarium \S+ onto /dev/vda .* rebooting into it`)
		t.Logf("power-on to installed: %s", time.Since(start).Round(time.Second))
		expect(ctx, t, vm, `terrarium-init: boot disk /dev/vda,`)
	}
	s := expectStatus(ctx, t, vm, "provisioned", "failed")
	if c.install {
		t.Logf("power-on to installed, rebooted and provisioned: %s", time.Since(start).Round(time.Second))
	}
	require.Equal(t, "provisioned", s.State, "%+v", s)
	if c.bios && (c.iso == "" || c.install) {
		// GRUB found the image's entry on trial, tried it and recorded
		// the try; the initramfs counted it in the entry's name; the
		// healthy boot blessed it.
		assert.Regexp(t, `Terrarium: slot a trial \(terrarium-a\+3\.conf\), slot b none \(no entry\): booting slot a`, vm.Console())
		assert.Contains(t, vm.Console(), "terrarium-init: boot counting: slot a: 1 try by GRUB counted: terrarium-a+3.conf is now terrarium-a+2-1.conf")
		assert.Equal(t, "blessed", s.Blessed, "a healthy first boot under BIOS is blessed")
	}
	assert.Equal(t, c.hostname, s.Hostname)
	assert.Contains(t, s.Enrolled, c.source)
	if c.address != "" {
		has := func(a string) bool { return strings.HasPrefix(a, c.address+" ") }
		assert.True(t, slices.ContainsFunc(s.Addresses, has), "addresses %v, want %s", s.Addresses, c.address)
	}
	user := c.user
	if user == "" {
		user = "admin"
	}
	ssh, err := trySSHAs(ctx, t, port, key, user)
	require.NoError(t, err, "%s logs in with its key", user)
	got, err := ssh.read("hostname")
	require.NoError(t, err)
	assert.Equal(t, c.hostname, strings.TrimSpace(got), "the key works and the hostname is set")
	if c.check != nil {
		c.check(t, ssh)
	}
	if c.install {
		ssh.run("sudo systemd-run --on-active=1s /usr/bin/systemctl reboot")
		// The handover is shown once the disk's own initramfs runs
		// (the installed system's boot to provisioned was shown
		// above).
		again := time.Now()
		if c.bios {
			expect(ctx, t, vm, `Terrarium: the ISO hands the boot over to the installed disk \(hd\d\)`)
		} else {
			expect(ctx, t, vm, `Terrarium is installed on /dev/vda: booting it`)
		}
		expect(ctx, t, vm, `terrarium-init: boot disk /dev/vda,`)
		t.Logf("rebooted with the ISO first: handed over to the disk in %s", time.Since(again).Round(time.Second))
	}
	require.NoError(t, vm.Quit(ctx))
	if c.install {
		// sgdisk reads the installed disk as a raw image.
		raw := filepath.Join(t.TempDir(), "installed.raw")
		run(t, "qemu-img", "convert", "-O", "raw", m.disk, raw)
		assert.Contains(t, run(t, "sgdisk", "-v", raw), "No problems found")
	}
	checkCapture(t, m.capture, testSubnet)
	t.Logf("%s: provisioned as %s, enrolled %s", c.name, s.Hostname, s.Enrolled)
}

// checkFirmware asserts which firmware booted the node: "uefi" or "bios".
func checkFirmware(t *testing.T, ssh *sshClient, want string) {
	t.Helper()
	out, err := ssh.read("if [ -d /sys/firmware/efi ]; then echo uefi; else echo bios; fi")
	require.NoError(t, err, out)
	assert.Equal(t, want, strings.TrimSpace(out), "the firmware that booted the node")
}
