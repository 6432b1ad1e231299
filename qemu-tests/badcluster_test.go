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

// TestBadClusterConfigs: one machine is handed bad config disks one after
// another (each a USB stick, hot-swapped): a misspelt field, and those of
// the cluster issue. Each is named on the console, field and fix, and at
// the end TERRA-STATE shows that nothing was applied from any of them.
func TestBadClusterConfigs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootTimeout)
	defer cancel()
	bin := fixture(t, "TERRARIUM_BIN")
	work := t.TempDir()
	for _, name := range []string{"lab", "other"} {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "imagebuild"), "config", "cluster", "--name", name,
			"--control-plane", "cp-1=10.77.0.10", "--worker", "w-1=10.77.0.20", "-o", filepath.Join(work, name)).CombinedOutput()
		if err != nil {
			t.Fatalf("imagebuild config cluster %s: %v\n%s", name, err, out)
		}
	}
	good := readFile(t, filepath.Join(work, "lab", "w-1.yaml"))
	otherHash := regexp.MustCompile(`caCertHash: (sha256:[0-9a-f]{64})`).FindStringSubmatch(readFile(t, filepath.Join(work, "other", "w-1.yaml")))
	if otherHash == nil {
		t.Fatal("the other cluster's config has no caCertHash")
	}

	m := newMachine(t, fixture(t, "TERRARIUM_IMAGE"))
	sticks := make([]qemu.Disk, len(badClusterDisks))
	for i, bd := range badClusterDisks {
		bad := bd.edit(good, otherHash[1])
		if bad == good {
			t.Fatalf("%s: the edit changed nothing", bd.name)
		}
		id := fmt.Sprintf("stick%d", i)
		sticks[i] = qemu.Disk{ID: id, Path: m.configDisk(id+".img", bad), Format: "raw", Bus: qemu.BusUSB, ReadOnly: true}
	}
	vm := m.boot(ctx, sticks[0])
	for i, bd := range badClusterDisks {
		if i > 0 {
			if err := vm.UnplugDisk(ctx, sticks[i-1].ID); err != nil {
				t.Fatal(err)
			}
			if err := vm.HotplugDisk(ctx, sticks[i]); err != nil {
				t.Fatal(err)
			}
		}
		expect(ctx, t, vm, `the config is invalid; nothing was applied`)
		expect(ctx, t, vm, bd.want)
		s := expectStatus(ctx, t, vm, "config-invalid")
		if s.Hostname != "" || !regexp.MustCompile(bd.want).MatchString(s.Message) {
			t.Fatalf("%s: status = %+v, want config-invalid with the problem and no hostname", bd.name, s)
		}
		t.Logf("%s: the console says %q", bd.name, regexp.MustCompile(bd.want).FindString(s.Message))
	}
	if err := vm.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	st := m.inspectState()
	if journal := st.readFile("/terrarium/journal.json"); strings.Contains(journal, `"applied"`) || strings.Contains(journal, `"provisioned"`) ||
		strings.Contains(journal, `"kubeadm"`) || strings.Contains(journal, `"enrollment"`) {
		t.Fatalf("a bad cluster config applied something:\n%s", journal)
	}
	if got := st.readFile("/etc/upper/hostname"); strings.Contains(got, "w-1") {
		t.Errorf("the hostname was written from a bad cluster config: %q", got)
	}
	// debugfs prints nothing on stdout for a file that does not exist.
	for _, f := range []string{"/etc/upper/terrarium/kubeadm.yaml", "/etc/upper/kubernetes/pki/ca.crt", "/terrarium/machine.yaml"} {
		if got := st.readFile(f); got != "" {
			t.Errorf("%s was written from a bad cluster config:\n%s", f, got)
		}
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
