package kubeadmflow

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/layout"
	"github.com/terrarium-os/terrarium/pkg/contract/machineconfig"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
)

func perm(t *testing.T, f *Flow, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(f.Path(p))
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// A control plane writes kube-apiserver's files root's alone and the
// audit log's directory before kubeadm runs; verify checks content and
// modes, and apply heals a loosened mode.
func TestControlPlaneFiles(t *testing.T) {
	f := testFlow(t, nil)
	said := reports(f)
	c := &machineconfig.Cluster{Role: machineconfig.RoleControlPlane,
		SecretsEncryptionKey: base64.StdEncoding.EncodeToString(make([]byte, 32))}
	require.Error(t, verifyControlPlaneFiles(f, c), "nothing written yet")
	require.NoError(t, applyControlPlaneFiles(f, c))
	want, err := kubeadmconfig.ControlPlaneFiles(c)
	require.NoError(t, err)
	require.Len(t, want, 3)
	for p, b := range want {
		got, err := os.ReadFile(f.Path(p))
		require.NoError(t, err)
		assert.Equal(t, string(b), string(got), p)
		assert.Equal(t, os.FileMode(0o600), perm(t, f, p), p)
	}
	assert.Equal(t, os.FileMode(0o700), perm(t, f, layout.AuditLogDir))
	require.NoError(t, verifyControlPlaneFiles(f, c))
	assert.Empty(t, *said, "a control plane with a key says nothing")

	require.NoError(t, os.Chmod(f.Path(layout.EncryptionConfigFile), 0o644))
	assert.ErrorContains(t, verifyControlPlaneFiles(f, c), layout.EncryptionConfigFile+" has mode -rw-r--r--, want -rw-------")
	require.NoError(t, applyControlPlaneFiles(f, c))
	require.NoError(t, verifyControlPlaneFiles(f, c))

	c.PodSecurity = &machineconfig.PodSecurity{Enforce: machineconfig.PodSecurityRestricted}
	assert.ErrorContains(t, verifyControlPlaneFiles(f, c), layout.AdmissionConfigFile+" differs from the machine config")
}

// A rotation: a node without the file writes with the current key; the
// boot after a change to a new key writes the prepare stage (the old key's file is no stage of the new keys); a stage the
// rotation's controller moved on to is kept at the next boot; a file
// written for other keys is not.
func TestEncryptionConfigAcrossARotation(t *testing.T) {
	f := testFlow(t, nil)
	oldKey := base64.StdEncoding.EncodeToString(make([]byte, 32))
	newKey := base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!"))
	before := &machineconfig.Cluster{Role: machineconfig.RoleControlPlane, SecretsEncryptionKey: oldKey}
	after := &machineconfig.Cluster{Role: machineconfig.RoleControlPlane, SecretsEncryptionKey: newKey, RetiredSecretsEncryptionKeys: []string{oldKey}}
	stage := func(c *machineconfig.Cluster, st kubeadmconfig.EncryptionStage) string {
		b, err := kubeadmconfig.EncryptionConfig(c, st)
		require.NoError(t, err)
		return string(b)
	}
	read := func() string {
		b, err := os.ReadFile(f.Path(layout.EncryptionConfigFile))
		require.NoError(t, err)
		return string(b)
	}
	require.NoError(t, applyControlPlaneFiles(f, before))
	assert.Equal(t, stage(before, kubeadmconfig.EncryptionWrite), read(), "a node without the file writes with the current key")
	assert.ErrorContains(t, verifyControlPlaneFiles(f, after), "is not written for the machine config's secrets encryption keys")
	require.NoError(t, applyControlPlaneFiles(f, after))
	assert.Equal(t, stage(after, kubeadmconfig.EncryptionPrepare), read())
	require.NoError(t, verifyControlPlaneFiles(f, after))

	for _, st := range []kubeadmconfig.EncryptionStage{kubeadmconfig.EncryptionWrite, kubeadmconfig.EncryptionDone} {
		require.NoError(t, os.WriteFile(f.Path(layout.EncryptionConfigFile), []byte(stage(after, st)), 0o600))
		require.NoError(t, applyControlPlaneFiles(f, after))
		assert.Equal(t, stage(after, st), read(), "stage %s kept", st)
		require.NoError(t, verifyControlPlaneFiles(f, after))
	}
	require.NoError(t, os.WriteFile(f.Path(layout.EncryptionConfigFile), []byte("# edited by hand\n"), 0o600))
	require.NoError(t, applyControlPlaneFiles(f, after))
	assert.Equal(t, stage(after, kubeadmconfig.EncryptionPrepare), read())
}

// A control plane whose config holds no key writes no encryption
// configuration and says so in one line naming the fix.
func TestControlPlaneWithoutEncryptionKey(t *testing.T) {
	f := testFlow(t, nil)
	said := reports(f)
	c := &machineconfig.Cluster{Role: machineconfig.RoleInit}
	require.NoError(t, applyControlPlaneFiles(f, c))
	assert.NoFileExists(t, f.Path(layout.EncryptionConfigFile))
	assert.FileExists(t, f.Path(layout.AuditPolicyFile))
	require.NoError(t, verifyControlPlaneFiles(f, c))
	require.Len(t, *said, 1)
	assert.Equal(t, "secrets encryption: off: "+NoEncryptionKey, (*said)[0])
	assert.Contains(t, (*said)[0], "Secrets are NOT encrypted at rest in etcd")
	assert.Contains(t, (*said)[0], "imagebuild config cluster --secrets SECRETS")
}

// The CA files are root's alone; etcd gets a copy of its CA's
// certificate, its own; a node formed by an earlier release with
// readable certificates is healed, not refused.
func TestPKIModes(t *testing.T) {
	f := testFlow(t, nil)
	write(t, f, "/etc/passwd", 0o644, passwdWithEtcd)
	c := &machineconfig.Config{Cluster: &machineconfig.Cluster{Role: machineconfig.RoleInit, CACert: "ca cert\n", PKI: &machineconfig.ClusterPKI{
		CAKey: "ca key\n", FrontProxyCA: machineconfig.KeyPair{Cert: "fp cert\n", Key: "fp key\n"},
		EtcdCA: machineconfig.KeyPair{Cert: "etcd cert\n", Key: "etcd key\n"}, ServiceAccount: machineconfig.KeyPair{Cert: "sa pub\n", Key: "sa key\n"},
	}}}
	ctx := context.Background()
	require.NoError(t, applyKubernetesPKI(ctx, f, c))
	for name := range pkiFiles(c.Cluster) {
		p := filepath.Join(KubernetesPKIDir, name)
		assert.Equal(t, os.FileMode(0o600), perm(t, f, p), name)
		uid, gid := ownerOf(t, f, p)
		assert.Equal(t, []int{0, 0}, []int{uid, gid}, name)
	}
	uid, gid := ownerOf(t, f, layout.EtcdOwnPKIDir+"/ca.crt")
	assert.Equal(t, []int{etcdUID, etcdGID}, []int{uid, gid}, "etcd checks its peers and clients with its copy")
	assert.Equal(t, os.FileMode(0o700), perm(t, f, KubernetesPKIDir))
	assert.Equal(t, os.FileMode(0o700), perm(t, f, KubernetesPKIDir+"/etcd"))
	assert.Equal(t, os.FileMode(0o700), perm(t, f, layout.EtcdOwnPKIDir))
	assert.NoDirExists(t, f.Path(layout.EtcdDataDir), "not before etcd's own certificates: kubeadm's preflight wants none")
	require.NoError(t, verifyKubernetesPKI(ctx, f, c))

	require.NoError(t, os.Chown(f.Path(layout.EtcdOwnPKIDir+"/ca.crt"), 0, 0))
	assert.ErrorContains(t, verifyKubernetesPKI(ctx, f, c), layout.EtcdOwnPKIDir+"/ca.crt is owned by 0:0, want 232:232")
	require.NoError(t, applyKubernetesPKI(ctx, f, c))
	require.NoError(t, verifyKubernetesPKI(ctx, f, c))

	require.NoError(t, os.Chmod(f.Path(KubernetesPKIDir+"/ca.crt"), 0o644))
	assert.ErrorContains(t, verifyKubernetesPKI(ctx, f, c), "/etc/kubernetes/pki/ca.crt has mode -rw-r--r--, want -rw-------")
	require.NoError(t, applyKubernetesPKI(ctx, f, c))
	require.NoError(t, verifyKubernetesPKI(ctx, f, c))

	require.NoError(t, os.Remove(f.Path(KubernetesPKIDir+"/sa.pub")))
	assert.Error(t, verifyKubernetesPKI(ctx, f, c), "a missing file is reported, not a panic")
}
