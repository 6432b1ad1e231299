package upgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

var update = flag.Bool("update", false, "rewrite the golden file and the fuzz seed corpus under testdata/")

const golden = "testdata/sample.upgrade"

func TestRoundTrip(t *testing.T) {
	key := fixedKey(1)
	var buf bytes.Buffer
	written, err := upgrade.Write(context.Background(), &buf, sampleManifest(), writeParts(t, sampleParts()), key)
	require.NoError(t, err)
	assert.Equal(t, upgrade.FormatVersion, written.FormatVersion)

	f, err := open(buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, written, f.Manifest())
	signer, err := f.Signer()
	require.NoError(t, err)
	assert.Equal(t, signature.PublicKeyOf(key), signer)

	v, err := f.Verify(context.Background(), []signature.PublicKey{signature.PublicKeyOf(fixedKey(2)), signature.PublicKeyOf(key)})
	require.NoError(t, err)
	assert.Equal(t, signature.PublicKeyOf(key), v.Signer())
	m := v.Manifest()
	assert.Equal(t, written, m)
	for i, p := range sampleParts() {
		info := m.Parts[i]
		assert.Equal(t, p.name, info.Name)
		assert.Equal(t, p.role, info.Role)
		assert.Equal(t, int64(len(p.data)), info.Size)

		var out bytes.Buffer
		require.NoError(t, v.CopyPart(context.Background(), &out, p.name))
		assert.Equal(t, p.data, out.Bytes(), "CopyPart %s", p.name)

		r, got, err := v.Part(p.name)
		require.NoError(t, err)
		assert.Equal(t, info, got)
		data, err := io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, p.data, data, "Part %s", p.name)
	}
	kernel, ok := m.PartByRole(upgrade.RoleKernel)
	require.True(t, ok)
	assert.Equal(t, "vmlinuz", kernel.Name)

	// A Verified hands out its parts to concurrent copiers.
	var wg sync.WaitGroup
	for _, p := range sampleParts() {
		wg.Go(func() {
			var out bytes.Buffer
			assert.NoError(t, v.CopyPart(context.Background(), &out, p.name))
			assert.Equal(t, p.data, out.Bytes())
		})
	}
	wg.Wait()

	_, _, err = v.Part("nope")
	assert.ErrorContains(t, err, `no part "nope"; it has rootfs.squashfs, vmlinuz, initrd.img`)

	// Any tar reads it: the manifest, its signature, the parts in order.
	ms := members(t, buf.Bytes())
	require.Len(t, ms, 5)
	assert.Equal(t, upgrade.ManifestName, ms[0].name)
	assert.Equal(t, upgrade.SignatureName, ms[1].name)
	for i, p := range sampleParts() {
		assert.Equal(t, p.name, ms[2+i].name)
		assert.Equal(t, p.data, ms[2+i].data)
	}
}

// An upgrade file may carry the build's SBOM as a fourth part: it is
// signed and checked like the others.
// writeVerified writes an upgrade file of parts signed by fixedKey(1) and
// returns its bytes and the file verified.
func writeVerified(t *testing.T, parts []testPart) ([]byte, *upgrade.Verified) {
	t.Helper()
	var buf bytes.Buffer
	_, err := upgrade.Write(context.Background(), &buf, sampleManifest(), writeParts(t, parts), fixedKey(1))
	require.NoError(t, err)
	f, err := open(buf.Bytes())
	require.NoError(t, err)
	v, err := f.Verify(context.Background(), []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))})
	require.NoError(t, err)
	return buf.Bytes(), v
}

// TestUKIParts: a Secure Boot build's upgrade file carries both slots'
// UKIs besides the kernel and initramfs; each is found by its slot's role.
func TestUKIParts(t *testing.T) {
	parts := append(sampleParts(),
		testPart{"terrarium-a.efi", upgrade.RoleUKIA, []byte("MZ uki for slot a")},
		testPart{"terrarium-b.efi", upgrade.RoleUKIB, []byte("MZ uki for slot b")})
	_, v := writeVerified(t, parts)
	m := v.Manifest()
	for _, slot := range []string{"a", "b"} {
		p, ok := m.PartByRole(upgrade.UKIRole(slot))
		require.True(t, ok, "slot %s's UKI", slot)
		var out bytes.Buffer
		require.NoError(t, v.CopyPart(context.Background(), &out, p.Name))
		assert.Equal(t, "MZ uki for slot "+slot, out.String())
	}
}

func TestSBOMPart(t *testing.T) {
	parts := append(sampleParts(), testPart{"sbom.cdx.json", upgrade.RoleSBOM, []byte(`{"bomFormat":"CycloneDX"}`)})
	file, v := writeVerified(t, parts)
	m := v.Manifest()
	sbom, ok := m.PartByRole(upgrade.RoleSBOM)
	require.True(t, ok)
	assert.Equal(t, "sbom.cdx.json", sbom.Name)
	var out bytes.Buffer
	require.NoError(t, v.CopyPart(context.Background(), &out, sbom.Name))
	assert.JSONEq(t, `{"bomFormat":"CycloneDX"}`, out.String())

	// A flipped byte in it fails the check like any part's.
	b := bytes.Clone(file)
	i := bytes.Index(b, []byte(`"bomFormat"`))
	require.Positive(t, i)
	b[i+1] ^= 1
	f, err := open(b)
	require.NoError(t, err)
	_, err = f.Verify(context.Background(), []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))})
	require.ErrorIs(t, err, upgrade.ErrHashMismatch)
}

func TestReproducible(t *testing.T) {
	first, second := build(t, fixedKey(1)), build(t, fixedKey(1))
	assert.Equal(t, first, second, "two writes of the same inputs differ")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
		require.NoError(t, os.WriteFile(golden, first, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -run TestReproducible -update to write it")
	assert.Equal(t, want, first, "the format changed: if on purpose, bump FormatVersion and run go test -update")
}

func TestFlippedPartByte(t *testing.T) {
	good := build(t, fixedKey(1))
	for _, p := range sampleParts() {
		for _, at := range []int{0, len(p.data) / 2, len(p.data) - 1} {
			t.Run(p.name, func(t *testing.T) {
				start := bytes.Index(good, p.data)
				require.Positive(t, start)
				bad := bytes.Clone(good)
				bad[start+at] ^= 0x40
				_, err := verify(bad, fixedKey(1))
				require.ErrorIs(t, err, upgrade.ErrHashMismatch)
				var e *upgrade.Error
				require.ErrorAs(t, err, &e)
				assert.Equal(t, p.name, e.Member)
				assert.Equal(t, "test.upgrade", e.File)
				assert.Contains(t, err.Error(), "test.upgrade: member "+p.name+": sha256 ")
				assert.Contains(t, err.Error(), "copy it again from its source")
			})
		}
	}
}

func TestFlippedManifestByte(t *testing.T) {
	good := build(t, fixedKey(1))
	manifest := members(t, good)[0].data
	start := bytes.Index(good, manifest)
	// Edits that keep the manifest valid: only the signature catches them.
	for _, edit := range []struct{ name, from, to string }{
		{"version", `"version": "0.2.0"`, `"version": "0.3.0"`},
		{"minFromVersion", `"minFromVersion": "0.1.0"`, `"minFromVersion": "0.0.0"`},
		{"compatible", `"compatible": "terrarium"`, `"compatible": "terrariun"`},
		{"hash", `"sha256": "`, `"sha256": "`},
	} {
		t.Run(edit.name, func(t *testing.T) {
			bad := bytes.Clone(good)
			i := bytes.Index(manifest, []byte(edit.from))
			require.GreaterOrEqual(t, i, 0)
			if edit.from == edit.to { // flip the first hex digit of a hash between 0-9a-f
				j := start + i + len(edit.from)
				bad[j] = "1032547698badcfe"[strings.IndexByte("0123456789abcdef", bad[j])]
			} else {
				copy(bad[start+i:], edit.to)
			}
			_, err := verify(bad, fixedKey(1))
			require.ErrorIs(t, err, upgrade.ErrBadSignature)
			assert.Contains(t, err.Error(), "test.upgrade: member manifest.json: signed by key "+signature.PublicKeyOf(fixedKey(1)).ID())
		})
	}
}

// TestEveryFlippedByte flips each byte of the headers, the manifest and
// its signature, and every 7th byte of the rest, in turn: no change goes
// unnoticed, and each is refused with a named error.
func TestEveryFlippedByte(t *testing.T) {
	good := build(t, fixedKey(1))
	partsAt := bytes.Index(good, sampleParts()[0].data)
	known := []error{upgrade.ErrMalformed, upgrade.ErrTruncated, upgrade.ErrUnsigned, upgrade.ErrUnsupportedFormat,
		upgrade.ErrBadSignature, upgrade.ErrUnknownKey, upgrade.ErrHashMismatch}
	for i := range good {
		if i > partsAt && i%7 != 0 {
			continue
		}
		bad := bytes.Clone(good)
		bad[i] ^= 0x01
		_, err := verify(bad, fixedKey(1))
		require.Error(t, err, "byte %d flipped", i)
		require.Truef(t, isOneOf(err, known...), "byte %d: %v", i, err)
	}
}

func isOneOf(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func TestUnknownKey(t *testing.T) {
	data := build(t, fixedKey(3))
	_, err := verify(data, fixedKey(1), fixedKey(2))
	require.ErrorIs(t, err, upgrade.ErrUnknownKey)
	assert.Contains(t, err.Error(), "test.upgrade: member manifest.json.sig: signed by key "+signature.PublicKeyOf(fixedKey(3)).ID())

	_, err = verify(data)
	require.ErrorIs(t, err, upgrade.ErrUnknownKey, "no trusted key trusts nothing")
}

// TestSignatureDomain pins that an upgrade manifest's signature is not a
// machine config signature of the manifest's bytes, and back.
func TestSignatureDomain(t *testing.T) {
	key := fixedKey(1)
	ms := members(t, build(t, key))
	trusted := []signature.PublicKey{signature.PublicKeyOf(key)}
	_, err := signature.Verify(ms[1].data, ms[0].data, trusted)
	require.ErrorIs(t, err, signature.ErrBadSignature)

	configSig := signature.Sign(key, ms[0].data)
	ms[1].data = configSig
	data := archive(t, ms...)
	_, err = verify(data, key)
	require.ErrorIs(t, err, upgrade.ErrBadSignature)
}

func TestTruncated(t *testing.T) {
	good := build(t, fixedKey(1))
	partsAt := bytes.Index(good, sampleParts()[0].data)
	for n := 0; n < len(good); n++ {
		if n > partsAt && n%7 != 0 && n < len(good)-8 {
			continue // every 7th length in the parts, all before and at the end
		}
		_, err := open(good[:n])
		require.ErrorIs(t, err, upgrade.ErrTruncated, "cut to %d of %d bytes", n, len(good))
	}
	_, err := open(good[:len(good)-1])
	assert.ErrorContains(t, err, fmt.Sprintf("test.upgrade: the file ends at byte %d, before the end of the archive", len(good)-1))

	// A reader shorter than the size it is opened with.
	_, err = upgrade.Open(bytes.NewReader(good[:2000]), int64(len(good)))
	require.ErrorIs(t, err, upgrade.ErrTruncated)
}

func TestMalformed(t *testing.T) {
	good := build(t, fixedKey(1))
	ms := members(t, good)
	manifest, sig, rootfs, kernel, initrd := ms[0], ms[1], ms[2], ms[3], ms[4]
	extra := member{name: "extra.bin", data: []byte("x")}
	sigAt := blocks(len(manifest.data))      // where the signature's header is
	partsAt := sigAt + blocks(len(sig.data)) // where the first part's header is
	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"empty archive", archive(t), upgrade.ErrMalformed, "it does not start with a tar header"},
		{"not a tar", bytes.Repeat([]byte("QFI\xfb"), 1024), upgrade.ErrMalformed, "it does not start with a tar header"},
		{"part first", archive(t, rootfs, manifest, sig, kernel, initrd), upgrade.ErrMalformed, `the first member is "rootfs.squashfs", not manifest.json`},
		{"extra member first", archive(t, extra, manifest, sig, rootfs, kernel, initrd), upgrade.ErrMalformed, `the first member is "extra.bin"`},
		{"extra member after the signature", archive(t, manifest, sig, extra, rootfs, kernel, initrd), upgrade.ErrMalformed, fmt.Sprintf(`unknown member "extra.bin" at byte %d, where member rootfs.squashfs belongs`, partsAt)},
		{"extra member at the end", archive(t, manifest, sig, rootfs, kernel, initrd, extra), upgrade.ErrMalformed, `unknown member "extra.bin"`},
		{"extra member instead of the signature", archive(t, manifest, extra, rootfs, kernel, initrd), upgrade.ErrMalformed, fmt.Sprintf(`unknown member "extra.bin" at byte %d, where member manifest.json.sig belongs`, sigAt)},
		{"duplicate part", archive(t, manifest, sig, rootfs, rootfs, kernel, initrd), upgrade.ErrMalformed, `a second member "rootfs.squashfs"`},
		{"duplicate last part", archive(t, manifest, sig, rootfs, kernel, initrd, initrd), upgrade.ErrMalformed, `a second member "initrd.img"`},
		{"duplicate manifest", archive(t, manifest, manifest, sig, rootfs, kernel, initrd), upgrade.ErrMalformed, `a second member "manifest.json"`},
		{"duplicate signature", archive(t, manifest, sig, sig, rootfs, kernel, initrd), upgrade.ErrMalformed, `a second member "manifest.json.sig"`},
		{"parts reordered", archive(t, manifest, sig, kernel, rootfs, initrd), upgrade.ErrMalformed, "the parts are not in the manifest's order"},
		{"part missing", archive(t, manifest, sig, rootfs, kernel), upgrade.ErrMalformed, "member initrd.img: the archive ends where member initrd.img belongs"},
		{"part renamed", archive(t, manifest, sig, rootfs, member{"vmlinuz.efi", kernel.data}, initrd), upgrade.ErrMalformed, `unknown member "vmlinuz.efi"`},
		{"part shorter", archive(t, manifest, sig, rootfs, member{kernel.name, kernel.data[1:]}, initrd), upgrade.ErrMalformed, "member vmlinuz: it holds 511 bytes and the manifest says 512"},
		{"unsigned", archive(t, manifest, rootfs, kernel, initrd), upgrade.ErrUnsigned, "member manifest.json.sig: the member after manifest.json is missing"},
		{"manifest alone", archive(t, manifest), upgrade.ErrUnsigned, "build it with a signing key"},
		{"trailing data", append(bytes.Clone(good), make([]byte, 512)...), upgrade.ErrMalformed, "512 bytes follow the end of the archive"},
		{"trailing byte", append(bytes.Clone(good), 'x'), upgrade.ErrMalformed, "1 bytes follow the end of the archive"},
		{"oversized manifest", archive(t, member{upgrade.ManifestName, make([]byte, upgrade.MaxManifestSize+1)}), upgrade.ErrMalformed, "member manifest.json: 1048577 bytes, more than the 1048576 a manifest may have"},
		{"oversized signature", archive(t, manifest, member{upgrade.SignatureName, make([]byte, signature.MaxFileSize+1)}), upgrade.ErrMalformed, "more than the 4096 a signature may have"},
		{"manifest not JSON", archive(t, member{upgrade.ManifestName, []byte("{")}), upgrade.ErrMalformed, "member manifest.json: does not parse as JSON"},
		{"manifest reformatted", archive(t, member{upgrade.ManifestName, compact(t, manifest.data)}, sig, rootfs, kernel, initrd), upgrade.ErrMalformed, "not in the form imagebuild writes"},
		{"manifest of a newer format", archive(t, member{upgrade.ManifestName, []byte(`{"formatVersion": 2, "new": true}`)}), upgrade.ErrUnsupportedFormat, "member manifest.json: formatVersion 2; this program reads 1: the upgrade file has a format"},
		{"manifest with an unknown field", archive(t, member{upgrade.ManifestName, []byte(`{"formatVersion": 1, "new": true}`)}), upgrade.ErrMalformed, `unknown field "new"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := open(tt.data)
			require.ErrorIs(t, err, tt.want)
			assert.ErrorContains(t, err, tt.msg)
			assert.True(t, strings.HasPrefix(err.Error(), "test.upgrade: "), err.Error())
		})
	}
}

// blocks is the room a member of n bytes takes in a tar archive.
func blocks(n int) int { return 512 + (n+511)/512*512 }

func compact(t *testing.T, manifest []byte) []byte {
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, manifest))
	return b.Bytes()
}

// TestHeaders refuses headers Write does not write, even when tar reads
// them the same.
func TestHeaders(t *testing.T) {
	good := build(t, fixedKey(1))
	sigAt := blocks(len(members(t, good)[0].data))
	tests := []struct {
		name   string
		offset int
		value  string
		field  string
	}{
		{"mode", 100, "0000755", "mode"},
		{"owner", 265, "root", "user name"},
		{"mtime", 136, "00000000000", "mtime"},
		{"type", 156, "\x00", "type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := bytes.Clone(good)
			copy(bad[sigAt+tt.offset:], tt.value) // the signature's header
			_, err := open(bad)
			require.ErrorIs(t, err, upgrade.ErrMalformed)
			assert.ErrorContains(t, err, fmt.Sprintf("member manifest.json.sig: its header (at byte %d) differs from the one imagebuild writes", sigAt))
			assert.ErrorContains(t, err, "("+tt.field+")")
		})
	}
	bad := bytes.Clone(good)
	copy(bad[len(good)-1024-10:], "x") // the padding after the last part
	_, err := open(bad)
	require.ErrorIs(t, err, upgrade.ErrMalformed)
	assert.ErrorContains(t, err, "member initrd.img: the padding after its data is not zeros")
}

func TestVerifyCancelled(t *testing.T) {
	f, err := open(build(t, fixedKey(1)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.Verify(ctx, []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))})
	require.ErrorIs(t, err, context.Canceled)
}

// TestCopyPartChangedAfterVerify changes the file between Verify and
// CopyPart, as a stick swapped under the node would.
func TestCopyPartChangedAfterVerify(t *testing.T) {
	data := build(t, fixedKey(1))
	v, err := verify(data, fixedKey(1))
	require.NoError(t, err)
	kernel := sampleParts()[1]
	data[bytes.Index(data, kernel.data)+100] ^= 1
	err = v.CopyPart(context.Background(), io.Discard, kernel.name)
	require.ErrorIs(t, err, upgrade.ErrHashMismatch)
	assert.ErrorContains(t, err, "test.upgrade: member vmlinuz: sha256 ")
	require.NoError(t, v.CopyPart(context.Background(), io.Discard, sampleParts()[0].name))
}

// TestVerifySignatureChecksPartsOnCopy: VerifySignature reads no part,
// so a corrupt part passes it, and CopyPart refuses that part (and only
// that one) as it copies it; a key the node does not trust is refused
// at once.
func TestVerifySignatureChecksPartsOnCopy(t *testing.T) {
	data := build(t, fixedKey(1))
	kernel := sampleParts()[1]
	data[bytes.Index(data, kernel.data)+100] ^= 1
	f, err := open(data)
	require.NoError(t, err)
	trusted := []signature.PublicKey{signature.PublicKeyOf(fixedKey(1))}

	_, err = f.Verify(context.Background(), trusted)
	require.ErrorIs(t, err, upgrade.ErrHashMismatch, "Verify reads every part")

	v, err := f.VerifySignature(trusted)
	require.NoError(t, err, "the signature alone is good")
	assert.Equal(t, signature.PublicKeyOf(fixedKey(1)), v.Signer())
	err = v.CopyPart(context.Background(), io.Discard, kernel.name)
	require.ErrorIs(t, err, upgrade.ErrHashMismatch)
	assert.ErrorContains(t, err, "test.upgrade: member vmlinuz: sha256 ")
	require.NoError(t, v.CopyPart(context.Background(), io.Discard, sampleParts()[0].name), "an intact part copies")

	_, err = f.VerifySignature([]signature.PublicKey{signature.PublicKeyOf(fixedKey(2))})
	require.ErrorIs(t, err, upgrade.ErrUnknownKey)
}
