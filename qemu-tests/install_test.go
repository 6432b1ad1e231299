//go:build e2e

package qemutests

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// installChannel is the ISO's installer, which the USB/NUC guide walks
// through: three boots (live and install, installed, handed over), about
// 7 minutes under TCG, so it runs in make e2e-node rather than make test.
// TestConfigChannels boots the same ISO live from a CD-ROM.
var installChannel = channel{
	// The machine config comes by QEMU's fw_cfg, as in the table's
	// fw_cfg case on a disk image.
	name: "the ISO on a USB stick installs onto the empty disk, which boots enrolled; the ISO hands over to it",
	iso:  "usb", install: true, tpm: true,
	fwCfg: func(t *testing.T, dir, key string) []qemu.FwCfg {
		config := adminConfig("installed", key, "install:\n  disk:\n    minSize: 4GiB\n")
		return []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: write(t, dir, "machine.yaml", config)}}
	},
	hostname: "installed", source: "installed from the ISO",
	check: func(t *testing.T, ssh *sshClient) {
		out, err := ssh.read("findmnt -no SOURCE,FSTYPE /; findmnt -no SOURCE,FSTYPE " + layout.StateMount + "; lsblk -rno PARTLABEL /dev/vda | xargs")
		require.NoError(t, err, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		assert.Regexp(t, `^/dev/vda3\s+squashfs$`, lines[0], "the root is the installed slot A")
		assert.Regexp(t, `^/dev/mapper/terrarium-state\s+ext4$`, lines[1], "STATE is the installed disk's, encrypted")
		out, err = ssh.read("lsblk -rno NAME,TYPE,PARTLABEL -s /dev/mapper/terrarium-state | xargs")
		require.NoError(t, err, out)
		assert.Regexp(t, `^terrarium-state crypt\s+vda5 part TERRA-STATE`, strings.TrimSpace(out), "the encrypted volume is TERRA-STATE on the installed disk")
		assert.Equal(t, "EFI BIOS-BOOT TERRA-A TERRA-B TERRA-STATE", lines[2], "the installer wrote the image's head: it boots under BIOS too")
	},
}

// TestISOInstall: the ISO on a USB stick installs onto the empty disk of
// a machine with a TPM, its TERRA-STATE encrypted with a key the TPM
// seals, which then boots enrolled from the config the live system was
// given, opening it;
// rebooted with the ISO still first, the ISO hands over to the disk.
func TestISOInstall(t *testing.T) {
	runChannel(t, len(channels), installChannel)
}

// installBIOSChannel is the installer under SeaBIOS, as an older plant PC
// boots a stick: the hybrid MBR's boot code loads GRUB's El Torito image
// from the stick, whose menu boots the live installer; the installed disk
// boots through its own MBR's GRUB, and with the ISO still first the
// ISO's menu hands the boot over to it.
var installBIOSChannel = channel{
	name: "the ISO on a USB stick under SeaBIOS installs onto the empty disk, which boots enrolled; the ISO's menu hands over to it",
	iso:  "usb", install: true, bios: true,
	fwCfg: func(t *testing.T, dir, key string) []qemu.FwCfg {
		config := adminConfig("installed-bios", key, "install:\n  disk:\n    minSize: 4GiB\n")
		return []qemu.FwCfg{{Name: "opt/dev.terrarium/config", File: write(t, dir, "machine.yaml", config)}}
	},
	hostname: "installed-bios", source: "installed from the ISO",
	check: func(t *testing.T, ssh *sshClient) {
		out, err := ssh.read("findmnt -no SOURCE,FSTYPE /; lsblk -rno PARTLABEL /dev/vda | xargs")
		require.NoError(t, err, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		assert.Regexp(t, `^/dev/vda3\s+squashfs$`, lines[0], "the root is the installed slot A")
		assert.Equal(t, "EFI BIOS-BOOT TERRA-A TERRA-B TERRA-STATE", lines[1])
		checkFirmware(t, ssh, "bios")
	},
}

// TestISOInstallBIOS: TestISOInstall's story under SeaBIOS, without a TPM.
func TestISOInstallBIOS(t *testing.T) {
	runChannel(t, len(channels)+1, installBIOSChannel)
}
