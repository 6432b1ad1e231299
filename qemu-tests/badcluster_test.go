package qemutests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/testvm/qemu"
)

// badClusterDisk is one bad cluster config disk: how it is made from a
// good worker config, and the line the console must show for it.
type badClusterDisk struct {
	name string
	edit func(cfg, otherHash string) string
	want string // a regular expression
}

var badClusterDisks = []badClusterDisk{
	{"a misspelt field",
		func(cfg, _ string) string { return strings.Replace(cfg, "      addresses:", "      adresses:", 1) },
		`\$\.network\.interfaces\[0\]\.adresses: unknown field; did you mean "addresses"\?`},
	{"wrong CA hash (a disk made for another cluster)",
		func(cfg, other string) string { return setYAMLLine(cfg, "caCertHash:", "  caCertHash: "+other) },
		`\$\.cluster\.caCertHash: sha256:[0-9a-f]{64} does not match caCert`},
	{"expired bootstrap token",
		func(cfg, _ string) string {
			return setYAMLLine(cfg, "tokenExpires:", "  tokenExpires: 2026-01-01T00:00:00Z")
		},
		`\$\.cluster\.tokenExpires: the bootstrap token expired at 2026-01-01T00:00:00Z .*--rotate-token`},
	{"a role the cluster cannot satisfy (a worker listed as a control plane)",
		func(cfg, _ string) string {
			return strings.Replace(cfg, "  controlPlanes:\n", "  controlPlanes:\n    - 10.77.0.20\n", 1)
		},
		`\$\.cluster\.role: worker, but nodeIP 10\.77\.0\.20 is listed as a control plane`},
	{"a control plane outside the node's subnet",
		func(cfg, _ string) string { return strings.Replace(cfg, "    - 10.77.0.10\n", "    - 10.78.0.10\n", 1) },
		`\$\.cluster\.controlPlanes\[0\]: 10\.78\.0\.10 is outside this node's subnets \(10\.77\.0\.20/24\) and no gateway is set`},
}

// refuseBadClusterConfigs hands a machine waiting for its config the bad
// cluster config disks one after another (each a USB stick, hot-swapped):
// a misspelt field, and those of the cluster issue. Each is named on the
// console and in the status, field and fix, with no hostname set; the
// last is pulled at the end. What the disks did not apply is checked on
// the stopped disk by badClusterConfigsLeftNothing.
func refuseBadClusterConfigs(ctx context.Context, t *testing.T, m *machine, vm *qemu.VM) {
	t.Helper()
	bin := fixture(t, "TERRARIUM_BIN")
	work := t.TempDir()
	for _, name := range []string{"lab", "other"} {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "config", "cluster", "--name", name,
			"--control-plane", "cp-1=10.77.0.10", "--worker", "w-1=10.77.0.20", "-o", filepath.Join(work, name)).CombinedOutput()
		require.NoError(t, err, "imagebuild config cluster %s: %s", name, out)
	}
	good := readFile(t, filepath.Join(work, "lab", "w-1.yaml"))
	otherHash := regexp.MustCompile(`caCertHash: (sha256:[0-9a-f]{64})`).FindStringSubmatch(readFile(t, filepath.Join(work, "other", "w-1.yaml")))
	require.NotNil(t, otherHash, "the other cluster's config has no caCertHash")

	for i, bd := range badClusterDisks {
		bad := bd.edit(good, otherHash[1])
		require.NotEqual(t, good, bad, "%s: the edit changed nothing", bd.name)
		id := fmt.Sprintf("bad%d", i)
		if i > 0 {
			require.NoError(t, vm.UnplugDisk(ctx, fmt.Sprintf("bad%d", i-1)))
		}
		require.NoError(t, vm.HotplugDisk(ctx, qemu.Disk{ID: id, Path: m.configDisk(id+".img", bad), Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}))
		expect(ctx, t, vm, `the config is invalid; nothing was applied`)
		expect(ctx, t, vm, bd.want)
		s := expectStatus(ctx, t, vm, "config-invalid")
		require.Empty(t, s.Hostname, "%s: a hostname was set: %+v", bd.name, s)
		require.Regexp(t, bd.want, s.Message, "%s: the status names the problem", bd.name)
		t.Logf("%s: the console says %q", bd.name, regexp.MustCompile(bd.want).FindString(s.Message))
	}
	require.NoError(t, vm.UnplugDisk(ctx, fmt.Sprintf("bad%d", len(badClusterDisks)-1)))
}

// badClusterConfigsLeftNothing checks on a stopped disk that no bad
// cluster config applied anything of a cluster node.
func badClusterConfigsLeftNothing(t *testing.T, st *stateDisk) {
	t.Helper()
	assert.NotContains(t, st.readFile("/etc/upper/hostname"), "w-1", "the hostname was written from a bad cluster config")
	journal := st.readFile("/terrarium/journal.json")
	assert.NotContains(t, journal, `"kubeadm"`, "a bad cluster config ran a kubeadm step")
	assert.NotContains(t, journal, `w-1`, "a bad cluster config was enrolled")
	// debugfs prints nothing on stdout for a file that does not exist.
	for _, f := range []string{"/etc/upper/terrarium/kubeadm.yaml", "/etc/upper/kubernetes/pki/ca.crt"} {
		assert.Empty(t, st.readFile(f), "%s was written from a bad cluster config", f)
	}
}

// setYAMLLine replaces the first line whose trimmed text starts with
// prefix.
func setYAMLLine(s, prefix, line string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			lines[i] = line
			return strings.Join(lines, "\n")
		}
	}
	return s
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
