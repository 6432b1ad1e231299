package build

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/contract/upgrade"
)

func TestBundleVersions(t *testing.T) {
	kube, etcd := bundleVersions([]string{"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/kube-apiserver:v1.36.3", "docker.io/library/hello:1.0"})
	assert.Equal(t, "v1.36.3", kube)
	assert.Equal(t, "3.6.8", etcd, "kubeadm's build suffix dropped")

	kube, etcd = bundleVersions(nil)
	assert.Empty(t, kube+etcd, "no bundle, no versions")
}

// The build's upgrade file verifies with the key the spec names, carries
// the slot's three parts and the SBOM, and two builds give the same bytes.
func TestWriteUpgradeFile(t *testing.T) {
	dir := t.TempDir()
	key, pub, err := signature.GenerateKey()
	require.NoError(t, err)
	pemKey, err := signature.MarshalPrivateKey(key)
	require.NoError(t, err)
	in := upgradeInputs{name: "terrarium", version: "0.2.0", builtAt: "2026-01-01T00:00:00Z",
		rootfs: filepath.Join(dir, "slot.squashfs"), kernel: filepath.Join(dir, "vmlinuz"), initrd: filepath.Join(dir, "initrd.img"),
		sbom: filepath.Join(dir, "sbom.cdx.json"), key: filepath.Join(dir, "build.key")}
	for f, content := range map[string]string{in.rootfs: "squashfs", in.kernel: "kernel", in.initrd: "initrd", in.sbom: `{"bomFormat":"CycloneDX"}`, in.key: string(pemKey)} {
		require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
	}
	a, b := filepath.Join(dir, "a.upgrade"), filepath.Join(dir, "b.upgrade")
	m, err := writeUpgradeFile(context.Background(), in, a)
	require.NoError(t, err)
	assert.Equal(t, "0.0.0", m.MinFromVersion)
	assert.Equal(t, "terrarium", m.Compatible)
	_, err = writeUpgradeFile(context.Background(), in, b)
	require.NoError(t, err)
	ab, err := os.ReadFile(a)
	require.NoError(t, err)
	bb, err := os.ReadFile(b)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ab, bb), "reproducible")

	f, err := os.Open(a)
	require.NoError(t, err)
	defer f.Close()
	uf, err := upgrade.Open(f, int64(len(ab)))
	require.NoError(t, err)
	v, err := uf.Verify(context.Background(), []signature.PublicKey{pub})
	require.NoError(t, err)
	vm := v.Manifest()
	for _, role := range append(upgrade.Roles(), upgrade.RoleSBOM) {
		_, ok := vm.PartByRole(role)
		assert.True(t, ok, "part %s", role)
	}
	_, ok := vm.PartByRole(upgrade.RoleUKIA)
	assert.False(t, ok, "a build without secureBoot carries no UKI")

	// A Secure Boot build's carries both slots' UKIs.
	in.ukis = map[layout.Slot]string{}
	for _, slot := range layout.Slots() {
		in.ukis[slot] = filepath.Join(dir, "uki-"+string(slot))
		require.NoError(t, os.WriteFile(in.ukis[slot], []byte("MZ signed uki "+string(slot)), 0o600))
	}
	sb := filepath.Join(dir, "sb.upgrade")
	m, err = writeUpgradeFile(context.Background(), in, sb)
	require.NoError(t, err)
	for _, slot := range layout.Slots() {
		p, ok := m.PartByRole(upgrade.UKIRole(string(slot)))
		require.True(t, ok, "slot %s's UKI", slot)
		assert.Equal(t, "terrarium-"+string(slot)+".efi", p.Name)
	}
	in.ukis = nil

	in.key = filepath.Join(dir, "missing.key")
	_, err = writeUpgradeFile(context.Background(), in, filepath.Join(dir, "c.upgrade"))
	assert.ErrorContains(t, err, "upgrade.signingKey")
	assert.NoFileExists(t, filepath.Join(dir, "c.upgrade"))
}
