//go:build e2e

package qemutests

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/node/kube/kubeadmconfig"
)

// secretsKeyName is the name of the secrets file's current secrets
// encryption key, as etcd's values and the console name it.
func secretsKeyName(t *testing.T, secrets string) string {
	t.Helper()
	s, err := clustersecrets.Load(secrets)
	require.NoError(t, err)
	name, err := kubeadmconfig.EncryptionKeyName(s.SecretsEncryptionKey)
	require.NoError(t, err)
	return name
}

// etcdSecretKey is the name of the key a Secret is encrypted with in the
// control plane's etcd (k8s:enc:secretbox:v1:KEY:…), read raw; it fails
// the test when the Secret is there in plain text.
func etcdSecretKey(t *testing.T, ssh *sshClient, namespace, name, plain string) string {
	t.Helper()
	out, err := ssh.sudoTry(etcdctlAsAPIServer + " get /registry/secrets/" + namespace + "/" + name + " --print-value-only > /tmp/e2e-secret.raw && " +
		"echo prefix=$(head -c 34 /tmp/e2e-secret.raw) && echo plain=$(grep -a -c '" + plain + "' /tmp/e2e-secret.raw)")
	require.NoError(t, err, "etcdctl get of Secret %s/%s: %s", namespace, name, out)
	assert.Contains(t, out, "plain=0", "etcd holds Secret %s/%s's value in plain text", namespace, name)
	m := regexp.MustCompile(`prefix=k8s:enc:secretbox:v1:(key-[0-9a-f]{8}):`).FindStringSubmatch(out)
	require.NotNil(t, m, "Secret %s/%s is not encrypted with secretbox in etcd:\n%s", namespace, name, out)
	return m[1]
}

// rotateSecretsKey rotates the cluster's secrets encryption key as an
// operator does (docs/security.md#rotating-the-key): `imagebuild config
// cluster --rotate-secrets-key` with the cluster's arguments, then the
// control plane's new config on a signed TERRA-CONFIG stick. Its power is
// cut while it rewrites the Secrets; booted again, it finishes. It
// returns the old and the new key's names.
func rotateSecretsKey(ctx context.Context, t *testing.T, cp *clusterNode, configs, name string, args ...string) (oldKey, newKey string) {
	t.Helper()
	secrets := filepath.Join(configs, "secrets.yaml")
	oldKey = secretsKeyName(t, secrets)
	args = append([]string{"config", "cluster", "--name", name, "--ssh-key", filepath.Join(filepath.Dir(configs), "admin.pub"),
		"-o", configs, "--rotate-secrets-key"}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(fixture(t, "TERRARIUM_BIN"), "imagebuild"), args...).CombinedOutput()
	require.NoError(t, err, "imagebuild config cluster --rotate-secrets-key: %s", out)
	assert.Contains(t, string(out), "new secrets encryption key; the old one is kept as retired. The configs are generation 2")
	newKey = secretsKeyName(t, secrets)
	require.NotEqual(t, oldKey, newKey)

	s, err := clustersecrets.Load(secrets)
	require.NoError(t, err)
	signer, err := s.SigningPrivateKey()
	require.NoError(t, err)
	change := cp.m.signedDisk("rotate.img", withManagementNIC(t, filepath.Join(configs, cp.name+".yaml"), cp.mgmtMAC), signer)
	start := time.Now()
	require.NoError(t, cp.vm.HotplugDisk(ctx, stick(change)))
	expect(ctx, t, cp.vm, `config change from \S+, generation 2, signed by \S+ .*: accepted`)
	expect(ctx, t, cp.vm, `secrets encryption: progress: rewriting every Secret with `+newKey)
	t.Logf("%s: rewriting the Secrets with %s, %s after the stick; power cut", cp.name, newKey, time.Since(start).Round(time.Second))
	cutPower(ctx, t, cp.vm)
	cp.vm = cp.m.boot(ctx)
	done := expect(ctx, t, cp.vm, `secrets encryption: done: every Secret is written with `+newKey+`; kube-apiserver no longer reads the retired keys `+oldKey)
	t.Logf("%s: %s, %s after the stick", cp.name, strings.TrimSpace(done[0]), time.Since(start).Round(time.Second))
	return oldKey, newKey
}

// checkRetiredKeyGone: kube-apiserver's encryption configuration names
// only the current key.
func checkRetiredKeyGone(t *testing.T, ssh *sshClient, oldKey, newKey string) {
	t.Helper()
	out, err := ssh.sudoTry("grep -o 'name: key-[0-9a-f]*' /etc/kubernetes/encryption-config.yaml")
	require.NoError(t, err, out)
	assert.Contains(t, out, "name: "+newKey)
	assert.NotContains(t, out, oldKey, "kube-apiserver still reads the retired key")
}
