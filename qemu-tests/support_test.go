//go:build e2e

package qemutests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
	"github.com/terrarium-os/terrarium/pkg/node/config/configsource/volume"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// checkSupportStick inserts an empty FAT stick labelled TERRA-SUPPORT into
// vm over USB, waits for the node to say it wrote its bundle, pulls the
// stick and reads the archive from the stick's image: every member is
// there, and no secret of the cluster's secrets file is, in any form.
func checkSupportStick(ctx context.Context, t *testing.T, vm *qemu.VM, img, secretsFile string) {
	t.Helper()
	d, err := diskfs.Create(img, 64<<20, diskfs.SectorSizeDefault)
	require.NoError(t, err)
	_, err = d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeFat32, VolumeLabel: "TERRA-SUPPO"})
	require.NoError(t, err)
	require.NoError(t, d.Close())

	require.NoError(t, vm.HotplugDisk(ctx, qemu.Disk{ID: "support", Path: img, Format: "raw", Bus: qemu.BusUSB}))
	m, err := vm.Expect(ctx, regexp.MustCompile(`support: wrote (terrarium-support-\S+\.tar\.gz): (\d+) files, (\d+) redactions to the TERRA-SUPPORT stick; it may be removed`))
	require.NoError(t, err, "no support bundle written to the stick")
	require.NoError(t, vm.UnplugDisk(ctx, "support"))
	t.Logf("support bundle %s: %s files, %s redactions", m[1], m[2], m[3])

	// A control plane's whole audit log, beside the bundle.
	copied := regexp.MustCompile(`support: copied the audit log to (terrarium-support-\S+-audit) \((\d+) files, (\d+) bytes\)`).FindStringSubmatch(vm.Console())
	require.NotNil(t, copied, "the control plane's audit log was not copied to the stick")
	t.Logf("audit log on the stick: %s, %s files, %s bytes", copied[1], copied[2], copied[3])

	v, err := volume.Open(img)
	require.NoError(t, err)
	data, err := v.ReadFile(m[1], 256<<20)
	require.NoError(t, err)
	audit, err := v.ReadFile(copied[1]+"/audit.log", 256<<20)
	require.NoError(t, err)
	require.NoError(t, v.Close())
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

	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	var names []string
	var nodes string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		if strings.HasSuffix(h.Name, "/kubernetes/nodes.txt") {
			nodes = string(b)
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("%s holds a secret of the cluster (%.12s…)", h.Name, n)
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
