//go:build e2e

package qemutests

import (
	"bytes"
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// checkSupportStick has the control plane vm write its support bundle to
// a TERRA-SUPPORT stick (writeSupportStick) and reads it: every member is
// there, the whole audit log is beside it, and no secret of the
// cluster's secrets file is in either, in any form.
func checkSupportStick(ctx context.Context, t *testing.T, vm *qemu.VM, img, secretsFile string) {
	t.Helper()
	b := writeSupportStick(ctx, t, vm, img)

	// A control plane's whole audit log, beside the bundle.
	copied := regexp.MustCompile(`support: copied the audit log to (terrarium-support-\S+-audit) \((\d+) files, (\d+) bytes\)`).FindStringSubmatch(vm.Console())
	require.NotNil(t, copied, "the control plane's audit log was not copied to the stick")
	t.Logf("audit log on the stick: %s, %s files, %s bytes", copied[1], copied[2], copied[3])
	audit, err := b.stick.ReadFile(copied[1]+"/audit.log", 256<<20)
	require.NoError(t, err)
	assert.Contains(t, string(audit), `"kind":"Event"`)

	s, err := clustersecrets.Load(secretsFile)
	require.NoError(t, err)
	var needles []string
	for _, secret := range []string{s.CA.Key, s.FrontProxyCA.Key, s.EtcdCA.Key, s.ServiceAccount.Key, s.BootstrapToken.Secret, s.CertificateKey, s.SigningKey, s.Token()} {
		needles = append(needles, strings.TrimSpace(secret), base64.StdEncoding.EncodeToString([]byte(secret)))
		for _, line := range strings.Split(secret, "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				needles = append(needles, line)
			}
		}
	}

	var names []string
	var nodes string
	for name, body := range b.members {
		names = append(names, name)
		if strings.HasSuffix(name, "/kubernetes/nodes.txt") {
			nodes = string(body)
		}
		for _, n := range needles {
			if bytes.Contains(body, []byte(n)) {
				t.Errorf("%s holds a secret of the cluster (%.12s…)", name, n)
			}
		}
	}
	for _, n := range needles {
		if strings.Contains(string(audit), n) {
			t.Errorf("the audit log's copy holds a secret of the cluster (%.12s…)", n)
		}
	}
	all := strings.Join(names, "\n")
	for _, want := range []string{"/index.txt", "/node/status.json", "/node/journal.json", "/units/kubelet/journal.log", "/kubernetes/pods.txt"} {
		assert.Contains(t, all, want)
	}
	assert.Regexp(t, `cp-1\s+Ready`, nodes, "the control plane's bundle lists the nodes")
}
