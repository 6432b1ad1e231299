package kubeadmconfig

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// overlay is the image's tree of Terrarium's own files.
const overlay = "../../../../os/overlay"

// sysctlDirs are systemd-sysctl's directories, the first the strongest: a
// file there hides one of the same name in the others.
var sysctlDirs = []string{"etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d"}

// effectiveSysctls are the kernel settings the sysctl.d files under root
// leave, as systemd-sysctl applies them at boot: one file per name (from
// the strongest directory), the files in the order of their names, a
// later assignment over an earlier one.
func effectiveSysctls(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for i := len(sysctlDirs) - 1; i >= 0; i-- {
		matches, err := filepath.Glob(filepath.Join(root, sysctlDirs[i], "*.conf"))
		require.NoError(t, err)
		for _, m := range matches {
			files[filepath.Base(m)] = m
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, n := range names {
		f, err := os.Open(files[n])
		require.NoError(t, err)
		s := bufio.NewScanner(f)
		for s.Scan() {
			line := strings.TrimSpace(s.Text())
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s: %q is not key = value", files[n], line)
			k = strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(k), "-"), "/", ".")
			out[k] = strings.TrimSpace(v)
		}
		require.NoError(t, s.Err())
		require.NoError(t, f.Close())
	}
	return out
}

// TestKernelDefaultsAreTheImages: the image's sysctl.d files set every
// value the kubelet checks with protectKernelDefaults, so that it starts;
// a value the kubelet wants changed, or a file that overrides it, fails
// here and not on a node.
func TestKernelDefaultsAreTheImages(t *testing.T) {
	got := effectiveSysctls(t, overlay)
	require.NotEmpty(t, got, "no sysctl.d files under %s", overlay)
	for _, s := range KernelDefaults() {
		if assert.Contains(t, got, s.Name, "the image does not set %s, which the kubelet checks", s.Name) {
			assert.Equal(t, s.Value, got[s.Name], "%s: the kubelet wants %s", s.Name, s.Value)
		}
	}
	assert.Contains(t, kubeletHardening, "protectKernelDefaults: true")
}

// The reading of sysctl.d files: a file in /etc hides its namesake in
// /usr/lib, and a later file's value wins.
func TestEffectiveSysctls(t *testing.T) {
	root := t.TempDir()
	write := func(p, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
	}
	write("usr/lib/sysctl.d/10-a.conf", "# comment\nvm.panic_on_oom = 1\nkernel.panic=5\n")
	write("etc/sysctl.d/10-a.conf", "; hides usr/lib's\nkernel.panic = 20\n")
	write("usr/lib/sysctl.d/20-b.conf", "-kernel/panic_on_oops = 1\nkernel.panic = 10\n")
	assert.Equal(t, map[string]string{"kernel.panic": "10", "kernel.panic_on_oops": "1"}, effectiveSysctls(t, root))
}
