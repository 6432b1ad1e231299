package qemutests

import (
	"crypto/ed25519"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/configdisk"
	"github.com/terrarium-os/terrarium/pkg/contract/signature"
	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// signedDisk writes a config disk holding yaml and its signature by key.
func (m *machine) signedDisk(name, yaml string, key ed25519.PrivateKey) string {
	m.t.Helper()
	p := filepath.Join(m.dir, name)
	require.NoError(m.t, configdisk.WriteSigned(p, []byte(yaml), signature.Sign(key, []byte(yaml))))
	return p
}

func stick(path string) qemu.Disk {
	return qemu.Disk{ID: "stick", Path: path, Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}
}

// unitStarts reads when containerd and the registry last started
// (monotonic microseconds): a restart changes them.
func unitStarts(t *testing.T, s *sshClient) string {
	t.Helper()
	out, err := s.read("systemctl show -p ActiveEnterTimestampMonotonic containerd.service terrarium-registry.service")
	require.NoError(t, err, out)
	require.Regexp(t, `(?s)ActiveEnterTimestampMonotonic=[1-9][0-9]*.*ActiveEnterTimestampMonotonic=[1-9][0-9]*`, out)
	return out
}

// enrolledBanner is the banner's enrollment line.
var enrolledBanner = regexp.MustCompile(`│ enrolled\s+from /dev/disk/by-label/TERRA-CONFI\S* at 20\d\d-`)
