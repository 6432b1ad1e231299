package secureboot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/authenticode"
)

// sectionOffset is the file offset of a byte inside section name's data.
func sectionOffset(t *testing.T, path, name string) int64 {
	t.Helper()
	img, err := peOpen(path)
	require.NoError(t, err)
	defer img.Close()
	s := img.Section(name)
	require.NotNil(t, s, "section %s", name)
	return int64(s.Offset) + int64(s.VirtualSize)/2
}

func TestSignPE(t *testing.T) {
	ks := newTestKeySet(t)
	other := newTestKeySet(t)
	dir := t.TempDir()
	in := newUKIInputs(t, requireHostFile(t, hostStub, "systemd-boot-efi"), 2<<20+5, 700<<10+1)
	uki := filepath.Join(dir, "uki.efi")
	require.NoError(t, WriteUKI(in.u, uki))

	for _, tc := range []struct {
		name string
		in   string
	}{
		{"systemd-boot", requireHostFile(t, hostSDBoot, "systemd-boot-efi")},
		{"UKI", uki},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signed := filepath.Join(t.TempDir(), "signed.efi")
			require.NoError(t, SignPE(t.Context(), &ks.DB, tc.in, signed))
			assert.NoError(t, VerifyPE(t.Context(), ks.DB.CertFile, signed))
			assert.Error(t, VerifyPE(t.Context(), ks.DB.CertFile, tc.in), "unsigned")
			assert.Error(t, VerifyPE(t.Context(), ks.KEK.CertFile, signed), "another role's certificate")
			assert.Error(t, VerifyPE(t.Context(), other.DB.CertFile, signed), "another site's db")
		})
	}

	signed := filepath.Join(dir, "uki.signed.efi")
	require.NoError(t, SignPE(t.Context(), &ks.DB, uki, signed))
	good, err := os.ReadFile(signed)
	require.NoError(t, err)
	f, err := os.Open(signed)
	require.NoError(t, err)
	defer f.Close()
	secs, err := ReadUKI(f, int64(len(good)))
	require.NoError(t, err, "a signed UKI still reads")
	assert.Equal(t, in.u.Cmdline, string(secs[SectionCmdline]))

	// One byte altered anywhere the signature covers: refused.
	for _, tc := range []struct {
		name string
		off  int64
	}{
		{"in the kernel", sectionOffset(t, signed, SectionLinux)},
		{"in the initramfs", sectionOffset(t, signed, SectionInitrd)},
		{"in the command line", sectionOffset(t, signed, SectionCmdline)},
		{"in the os-release", sectionOffset(t, signed, SectionOSRel)},
		{"in the stub's code", sectionOffset(t, signed, ".text")},
		{"in the section table", 0x80 + 4 + 20 + 240 + 1},
		{"in the signature", int64(len(good)) - 300},
	} {
		t.Run("altered "+tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			b[tc.off] ^= 0x01
			p := writeFile(t, t.TempDir(), "altered.efi", b)
			assert.Error(t, VerifyPE(t.Context(), ks.DB.CertFile, p))
		})
	}

	assert.Error(t, SignPE(t.Context(), &ks.DB, uki, uki), "in place")
	assert.ErrorIs(t, SignPE(t.Context(), &ks.DB, signed, filepath.Join(dir, "twice.efi")), authenticode.ErrSigned, "signed already")
}

// TestSignPEReproducible: the signature holds no time, so the same key
// and image give the same bytes, and another key other bytes.
func TestSignPEReproducible(t *testing.T) {
	ks := newTestKeySet(t)
	other := newTestKeySet(t)
	sdboot := requireHostFile(t, hostSDBoot, "systemd-boot-efi")
	dir := t.TempDir()
	sign := func(k *Key, name string) []byte {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, SignPE(t.Context(), k, sdboot, p))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return b
	}
	first, second := sign(&ks.DB, "first.efi"), sign(&ks.DB, "second.efi")
	assert.True(t, bytes.Equal(first, second), "two signatures by one key differ")
	assert.False(t, bytes.Equal(first, sign(&other.DB, "other.efi")), "two keys' signatures are the same")
	assert.Zero(t, len(first)%8, "the signed image ends on an 8-byte boundary")
}
