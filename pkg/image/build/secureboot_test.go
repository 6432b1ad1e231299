package build

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/efisig"
	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/secureboot"
)

// hostStubFile is the build host's systemd-stub (make deps installs
// systemd-boot-efi), standing in for the image's.
const hostStubFile = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// stubBase is a rootfs base whose tarball holds only systemd-stub.
func stubBase(t *testing.T) *rootfs.Base {
	t.Helper()
	stub, err := os.ReadFile(hostStubFile)
	require.NoError(t, err, "systemd-stub: run make deps")
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, rootfs.BaseTar))
	require.NoError(t, err)
	tw := tar.NewWriter(f)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: rootfs.BaseStubInTar, Mode: 0o644, Size: int64(len(stub)), Typeflag: tar.TypeReg}))
	_, err = tw.Write(stub)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())
	return &rootfs.Base{Dir: dir}
}

// TestSignBoot: a Secure Boot build writes one UKI per slot whose command
// line names the slot, signs them and systemd-boot with the site's db key
// (sbverify accepts them with the db certificate and refuses them with
// another's), writes the enrollment files, and records the signed UKIs,
// which a second build makes byte for byte again; the ESP takes them.
func TestSignBoot(t *testing.T) {
	ctx := context.Background()
	keysDir := filepath.Join(t.TempDir(), "keys")
	ks, err := secureboot.Generate(keysDir, "plant-7")
	require.NoError(t, err)
	other, err := secureboot.Generate(filepath.Join(t.TempDir(), "other"), "plant-8")
	require.NoError(t, err)
	// Another site's db certificate stands in for Microsoft's UEFI CA.
	vendorCA := filepath.Join(t.TempDir(), "vendor-ca.der")
	require.NoError(t, os.WriteFile(vendorCA, other.Key(secureboot.DB).Cert.Raw, 0o644))
	s := testSpec(t, "slotB: {mode: copy}\nsecureBoot: {keys: "+keysDir+", extraDB: [{cert: "+vendorCA+", owner: 77fa9abd-0359-4d32-bd60-28f4e78f784b}]}\n")
	base := stubBase(t)
	files := t.TempDir()
	kernel := filepath.Join(files, "vmlinuz")
	require.NoError(t, os.WriteFile(kernel, append([]byte("MZ"), make([]byte, 70000)...), 0o644))
	initrd := filepath.Join(files, "initrd.img")
	require.NoError(t, os.WriteFile(initrd, []byte(strings.Repeat("initramfs ", 3000)), 0o644))
	boot := bootFiles{kernel: kernel, initrd: initrd, sdboot: "/usr/lib/systemd/boot/efi/systemd-bootx64.efi", kernelVersion: "6.12.0-test"}
	slots := map[layout.Slot]string{layout.SlotA: "/cache/a", layout.SlotB: "/cache/b"}

	sb, err := signBoot(ctx, s, base, boot, slots, t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, "plant-7", sb.manifest.Site)
	assert.Equal(t, "if-safe", sb.manifest.Enroll)
	assert.Equal(t, hexSHA256(ks.Key(secureboot.DB).Cert.Raw), sb.manifest.DBCertSHA256)
	assert.Equal(t, "site plant-7, 2 UKIs signed", sb.note())

	dbCert := ks.Key(secureboot.DB).CertFile
	for _, slot := range layout.Slots() {
		uki := sb.ukis[slot]
		require.NoError(t, secureboot.VerifyPE(ctx, dbCert, uki), "slot %s's UKI is signed by db", slot)
		assert.Error(t, secureboot.VerifyPE(ctx, other.Key(secureboot.DB).CertFile, uki), "another site's db refuses slot %s's UKI", slot)
		f, err := os.Open(uki)
		require.NoError(t, err)
		fi, err := f.Stat()
		require.NoError(t, err)
		secs, err := secureboot.ReadUKI(f, fi.Size())
		require.NoError(t, f.Close())
		require.NoError(t, err)
		assert.Equal(t, "console=ttyS0 quiet terrarium.slot="+string(slot), strings.TrimRight(string(secs[".cmdline"]), "\x00"))
		assert.Contains(t, string(secs[".osrel"]), "Terrarium 1.2.3 (slot "+string(slot)+")")
		assert.Equal(t, slot.UKIPath(), sb.manifest.UKIs[slot].File)
	}
	require.NoError(t, secureboot.VerifyPE(ctx, dbCert, sb.sdboot), "systemd-boot is signed by db")
	require.Len(t, sb.enrollKeys, 3)
	for _, r := range secureboot.Roles() {
		b, err := os.ReadFile(sb.enrollKeys[secureboot.AuthFile(r)])
		require.NoError(t, err)
		v, err := secureboot.ParseAuthenticatedVariable(b)
		require.NoError(t, err, "%s.auth", r)
		assert.Equal(t, secureboot.NewEFITime(s.Epoch()), v.Timestamp, "%s.auth is stamped with the build's epoch", r)
		if r == secureboot.DB {
			lists, err := efisig.ParseSignatureLists(v.Data)
			require.NoError(t, err)
			certs, err := efisig.Certificates(lists)
			require.NoError(t, err)
			require.Len(t, certs, 2, "db holds the site's certificate and the extra one")
			assert.True(t, certs[0].Equal(ks.Key(secureboot.DB).Cert))
			assert.True(t, certs[1].Equal(other.Key(secureboot.DB).Cert))
			assert.Equal(t, "77fa9abd-0359-4d32-bd60-28f4e78f784b", lists[1].Signatures[0].Owner.String())
		}
	}

	again, err := signBoot(ctx, s, base, boot, slots, t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, sb.manifest.UKIs, again.manifest.UKIs, "the signed UKIs are reproducible")

	c, err := espContents(s, boot, slots, sb)
	require.NoError(t, err)
	assert.Equal(t, sb.sdboot, c.SystemdBoot)
	assert.Empty(t, c.GrubConfig, "a Secure Boot image boots under UEFI alone")
	assert.Equal(t, sb.enrollKeys, c.EnrollKeys)
	assert.Equal(t, "if-safe", c.SecureBootEnroll)
	for _, e := range c.Entries {
		assert.Equal(t, sb.ukis[e.Slot], e.UKI)
	}
}

// TestSignBootEnrollOff: with enroll: off the ESP carries no enrollment
// files (the site enrolls its keys in the firmware's own setup).
func TestSignBootEnrollOff(t *testing.T) {
	keysDir := filepath.Join(t.TempDir(), "keys")
	_, err := secureboot.Generate(keysDir, "plant-7")
	require.NoError(t, err)
	s := testSpec(t, "secureBoot: {keys: "+keysDir+", enroll: off}\n")
	files := t.TempDir()
	kernel := filepath.Join(files, "vmlinuz")
	require.NoError(t, os.WriteFile(kernel, append([]byte("MZ"), make([]byte, 4096)...), 0o644))
	boot := bootFiles{kernel: kernel, initrd: kernel, sdboot: "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"}
	sb, err := signBoot(context.Background(), s, stubBase(t), boot, map[layout.Slot]string{layout.SlotA: "/cache/a"}, t.TempDir())
	require.NoError(t, err)
	assert.Empty(t, sb.enrollKeys)
	assert.Len(t, sb.ukis, 1, "the ESP has the one slot the image holds")
	assert.Len(t, sb.slotUKIs(), 2, "the upgrade file has both slots'")
	c, err := espContents(s, boot, map[layout.Slot]string{layout.SlotA: "/cache/a"}, sb)
	require.NoError(t, err)
	assert.Empty(t, c.EnrollKeys)
}
