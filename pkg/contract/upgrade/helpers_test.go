package upgrade_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

// fixedKey returns the deterministic key made from seed byte b.
func fixedKey(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

// content returns n deterministic bytes that differ for each seed, with
// no zero byte, so that a part can be found in the file by its bytes.
func content(seed string, n int) []byte {
	var out []byte
	sum := sha256.Sum256([]byte(seed))
	for len(out) < n {
		for _, c := range sum {
			out = append(out, c|1)
		}
		sum = sha256.Sum256(sum[:])
	}
	return out[:n]
}

// testPart is a part of the sample upgrade file.
type testPart struct {
	name string
	role upgrade.Role
	data []byte
}

// sampleParts are small parts, of sizes that end mid-block, on a block
// boundary and one byte into a block.
func sampleParts() []testPart {
	return []testPart{
		{"rootfs.squashfs", upgrade.RoleRootfs, content("rootfs", 1500)},
		{"vmlinuz", upgrade.RoleKernel, content("kernel", 512)},
		{"initrd.img", upgrade.RoleInitramfs, content("initrd", 513)},
	}
}

// sampleManifest is a manifest for Write: everything but the parts.
func sampleManifest() upgrade.Manifest {
	return upgrade.Manifest{
		Version:           "0.2.0",
		Compatible:        "terrarium",
		MinFromVersion:    "0.1.0",
		KubernetesVersion: "v1.36.3",
		EtcdVersion:       "3.6.4",
		BuiltAt:           "2026-01-01T00:00:00Z",
	}
}

// writeParts writes the parts as files under t.TempDir and returns them
// as Write's parts.
func writeParts(t testing.TB, parts []testPart) []upgrade.Part {
	t.Helper()
	dir := t.TempDir()
	var out []upgrade.Part
	for _, p := range parts {
		path := filepath.Join(dir, p.name)
		require.NoError(t, os.WriteFile(path, p.data, 0o644))
		out = append(out, upgrade.FilePart(p.name, p.role, path))
	}
	return out
}

// build writes the sample upgrade file signed with key.
func build(t testing.TB, key ed25519.PrivateKey) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := upgrade.Write(context.Background(), &buf, sampleManifest(), writeParts(t, sampleParts()), key)
	require.NoError(t, err)
	return buf.Bytes()
}

// open opens an upgrade file held in memory.
func open(data []byte) (*upgrade.File, error) {
	return upgrade.Open(bytes.NewReader(data), int64(len(data)), upgrade.WithName("test.upgrade"))
}

// verify opens and verifies an upgrade file held in memory, trusting
// keys.
func verify(data []byte, keys ...ed25519.PrivateKey) (*upgrade.Verified, error) {
	f, err := open(data)
	if err != nil {
		return nil, err
	}
	var trusted []signature.PublicKey
	for _, k := range keys {
		trusted = append(trusted, signature.PublicKeyOf(k))
	}
	return f.Verify(context.Background(), trusted)
}

// member is a tar member for archives made by hand.
type member struct {
	name string
	data []byte
}

// archive writes members as Write would write them (same headers), so
// that a test can add, drop, repeat or reorder them.
func archive(t testing.TB, members ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range members {
		require.NoError(t, tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: m.name, Size: int64(len(m.data)), Mode: 0o644, ModTime: mtime, Format: tar.FormatUSTAR,
		}))
		_, err := tw.Write(m.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// members reads the members of a valid upgrade file with archive/tar.
func members(t testing.TB, data []byte) []member {
	t.Helper()
	var out []member
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(tr)
		require.NoError(t, err)
		out = append(out, member{name: h.Name, data: b.Bytes()})
	}
	return out
}
