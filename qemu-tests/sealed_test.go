//go:build e2e

package qemutests

import (
	"context"
	"encoding/pem"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/cluster/clustersecrets"
)

// TestSealedClusterDisk forms the same one-node cluster (configs from
// `imagebuild config cluster`) twice, one machine after the other: once
// on a machine without a TPM, whose TERRA-STATE is plain, and once on one
// with a TPM, whose TERRA-STATE is sealed. Powered off, each node's whole
// disk, as raw, is searched for a PEM private key (its BEGIN line and
// base64 after it: the image's own programs carry the words "PRIVATE KEY",
// never a key) and for a line of the cluster CA's private key: the plain
// disk holds both (the search works), the sealed one neither. Each run logs its time to a healthy node and the
// sequential write and read throughput of a file on STATE (256 MiB,
// direct I/O), the figures of docs/state-encryption.md.
func TestSealedClusterDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	key, configs := clusterConfigs(ctx, t, "e2e-sealed", "--control-plane", "cp-1="+soloIP+"@"+soloLinkMAC)
	config := withManagementNIC(t, filepath.Join(configs, "cp-1.yaml"), soloMgmtMAC)
	s, err := clustersecrets.Load(filepath.Join(configs, "secrets.yaml"))
	require.NoError(t, err)
	caKeyLine := pemLine(t, s.CA.Key)

	for _, sealed := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "sealed"}[sealed]
		t.Run(name, func(t *testing.T) {
			m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
			m.asSoloInit()
			m.tpm = sealed
			sshPort := m.forwardSSH()
			start := time.Now()
			vm := m.boot(ctx, configAttached(m.configDisk("config.img", config)))
			_, err := vm.Expect(ctx, healthyRE)
			require.NoError(t, err, "the node did not form its cluster")
			t.Logf("%s: healthy %s after power-on", name, time.Since(start).Round(time.Second))
			console := vm.Console()
			if sealed {
				assert.Contains(t, console, "terrarium: TERRA-STATE: encrypted (LUKS2, its key sealed by this machine's TPM)")
				assert.Regexp(t, `TERRA-STATE's recovery key: made, derived against the cluster's escrow key \S+; recovery code \S+`, console)
			} else {
				assert.Contains(t, console, "terrarium: TERRA-STATE: NOT encrypted: this machine has no TPM 2.0")
			}

			ssh := dialSSH(ctx, t, sshPort, key)
			out, err := ssh.sudoTry(`f=/var/lib/terrarium-throughput.bin; findmnt -no SOURCE --target /var/lib; ` +
				`dd if=/dev/zero of=$f bs=1M count=256 oflag=direct conv=fsync 2>&1 | tail -1; ` +
				`sync; echo 3 > /proc/sys/vm/drop_caches; dd if=$f of=/dev/null bs=1M iflag=direct 2>&1 | tail -1; rm -f $f`)
			require.NoError(t, err, out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 3, out)
			t.Logf("%s: STATE on %s: sequential write %s, read %s (256 MiB, direct I/O)", name, lines[0], rateOf(lines[1]), rateOf(lines[2]))
			if sealed {
				assert.True(t, strings.HasPrefix(lines[0], "/dev/mapper/terrarium-state"), "/var/lib is on %s", lines[0])
			}
			require.NoError(t, vm.Quit(ctx))

			raw := filepath.Join(t.TempDir(), "disk.raw")
			out2, err := exec.CommandContext(ctx, "qemu-img", "convert", "-O", "raw", m.disk, raw).CombinedOutput()
			require.NoError(t, err, "qemu-img convert: %s", out2)
			searched := time.Now()
			pemKey := fileMatches(t, raw, pemPrivateKey)
			caKey := fileContains(t, raw, []byte(caKeyLine))
			t.Logf("%s: the whole disk searched in %s: a PEM private key %v, the CA key's line %v", name, time.Since(searched).Round(time.Second), pemKey, caKey)
			if sealed {
				assert.False(t, pemKey, "a PEM private key is on the sealed disk in the clear")
				assert.False(t, caKey, "the cluster CA's key is on the sealed disk in the clear")
			} else {
				assert.True(t, pemKey, "the plain disk holds no PEM private key: the search finds nothing")
				assert.True(t, caKey, "the plain disk does not hold the CA key: the search finds nothing")
			}
		})
	}
}

// rateOf is the rate at the end of dd's last line ("…, 113 MB/s").
func rateOf(line string) string {
	m := regexp.MustCompile(`, ([0-9.,]+ [kMG]B/s)$`).FindStringSubmatch(line)
	if m == nil {
		return "? (" + line + ")"
	}
	return m[1]
}

// pemPrivateKey is the start of a PEM private key: its BEGIN line and
// base64.
var pemPrivateKey = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{40}`)

// pemLine is the first full base64 line of a PEM block: what a file that
// holds the key holds.
func pemLine(t *testing.T, s string) string {
	t.Helper()
	b, _ := pem.Decode([]byte(s))
	require.NotNil(t, b, "not PEM")
	lines := strings.Split(string(pem.EncodeToMemory(b)), "\n")
	require.Greater(t, len(lines), 2)
	return lines[1]
}
