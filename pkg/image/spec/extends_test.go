package spec

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/terrarium-os/terrarium/pkg/contract/signature"
)

const baseSpec = `apiVersion: terrarium.dev/v1alpha1
kind: BuildSpec
name: base
version: 1.0.0
os:
  suite: trixie
  packages: [systemd, linux-image-amd64, systemd-boot-efi, grub-pc-bin, busybox-static, e2fsprogs]
  overlay: overlay
bundles: [apps.yaml]
components:
  - component: comp
    programs: [tool]
    dir: /usr/bin
boot:
  tries: 2
outputs: [raw, ova]
`

// baseDir writes baseSpec and the files its paths name into a new
// directory and returns it.
func baseDir(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "overlay"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "comp"), 0o755))
	writeFile(t, dir, "apps.yaml", "")
	writeFile(t, dir, "base.yaml", spec)
	return dir
}

func TestExtendsReplacesTheSectionsItSets(t *testing.T) {
	base := baseDir(t, baseSpec)
	dir := t.TempDir()
	writeFile(t, dir, "more.yaml", "")
	rel, err := filepath.Rel(dir, filepath.Join(base, "base.yaml"))
	require.NoError(t, err)
	path := writeFile(t, dir, "test.yaml", `apiVersion: terrarium.dev/v1alpha1
kind: BuildSpec
extends: `+rel+`
name: test
bundles: [`+filepath.Join(base, "apps.yaml")+`, more.yaml]
outputs: [qcow2]
`)

	s, err := Parse(path)
	require.NoError(t, err)
	assert.Equal(t, "test", s.Name, "name: set here")
	assert.Equal(t, "1.0.0", s.Version, "version: the base's")
	assert.Equal(t, 2, s.Boot.Tries, "boot: the base's")
	assert.Equal(t, []string{filepath.Join(base, "apps.yaml"), filepath.Join(dir, "more.yaml")},
		[]string{s.Resolve(s.Bundles[0]), s.Resolve(s.Bundles[1])}, "bundles: set here, resolved against this file")
	assert.Equal(t, filepath.Join(base, "overlay"), s.Resolve(s.OS.Overlay), "the base's overlay, resolved against the base's file")
	assert.Equal(t, filepath.Join(base, "comp"), s.Resolve(s.Components[0].Component), "the base's component, resolved against the base's file")
	assert.Equal(t, []string{OutputQCOW2}, s.Outputs, "outputs: set here, whole")
	assert.Zero(t, s.VSphere.HardwareVersion, "defaults follow the merged outputs (no ova), not the base's")
	assert.Equal(t, dir, s.Dir())
	assert.Empty(t, s.Extends, "the merged spec stands on its own")
}

func TestExtendsErrors(t *testing.T) {
	tests := []struct {
		name string
		base string // the base spec ("" for no base file)
		ext  string // the extending spec's lines after kind
		want []string
	}{
		{
			name: "base invalid",
			base: strings.Replace(baseSpec, "tries: 2", "tries: 12", 1),
			ext:  "extends: base.yaml\nname: test\n",
			want: []string{"test.yaml: extends \"base.yaml\"", "base.yaml: $.boot.tries: is 12; use 1 to 9 (line 15)"},
		},
		{
			name: "base missing",
			ext:  "extends: absent.yaml\nname: test\n",
			want: []string{"test.yaml: extends \"absent.yaml\"", "absent.yaml: no such file"},
		},
		{
			name: "chain",
			base: strings.Replace(baseSpec, "name: base", "extends: other.yaml\nname: base", 1),
			ext:  "extends: base.yaml\nname: test\n",
			want: []string{"test.yaml: $.extends: names", "which extends \"other.yaml\" itself"},
		},
		{
			name: "own section invalid",
			base: baseSpec,
			ext:  "extends: base.yaml\nname: test\noutputs: [vhd]\n",
			want: []string{"test.yaml: $.outputs[0]: unknown output \"vhd\"", "(line 5)"},
		},
		{
			name: "an empty section",
			base: baseSpec,
			ext:  "extends: base.yaml\nname: test\nkernel:\n",
			want: []string{"test.yaml: $.kernel: is empty, which would drop the base's whole kernel", "(line 5)"},
		},
		{
			name: "unknown field",
			base: baseSpec,
			ext:  "extends: base.yaml\nnmae: test\n",
			want: []string{"test.yaml: $.nmae"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.base != "" {
				dir = baseDir(t, tt.base)
			}
			path := writeFile(t, dir, "test.yaml", "apiVersion: terrarium.dev/v1alpha1\nkind: BuildSpec\n"+tt.ext)
			s, err := Parse(path)
			require.Error(t, err)
			assert.Nil(t, s)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestTestSpec keeps the tests' image the default image plus the test
// applications, and the default image free of them: a Kubernetes bundle
// bumped in os/terrarium.yaml must be bumped in the test spec too.
func TestTestSpec(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	def, err := Parse(filepath.Join(root, "os", "terrarium.yaml"))
	require.NoError(t, err)
	test, err := Parse(filepath.Join(root, "qemu-tests", "testdata", "terrarium-test.yaml"))
	require.NoError(t, err)

	testApps, err := filepath.Abs(filepath.Join(root, "bundles", "test-apps.yaml"))
	require.NoError(t, err)
	var defBundles, testBundles []string
	for _, b := range def.Bundles {
		defBundles = append(defBundles, def.Resolve(b))
	}
	for _, b := range test.Bundles {
		testBundles = append(testBundles, test.Resolve(b))
	}
	assert.NotContains(t, defBundles, testApps, "os/terrarium.yaml carries no test content")
	assert.Equal(t, append(defBundles, testApps), testBundles, "terrarium-test.yaml: the default image's bundles, then the test apps")
	assert.Equal(t, def.OS.Packages, test.OS.Packages, "the same system as the default image")
	assert.Equal(t, "terrarium-test", test.Name)
}

// The cluster upgrade scenario's images (qemu-tests/testdata/
// cluster-upgrade.yaml.tmpl) are the default image with the test
// applications: the previous one with the Kubernetes release before the
// default's, built from components/previous, the current one with the
// default's.
func TestClusterUpgradeSpecs(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	def, err := Parse(filepath.Join(root, "os", "terrarium.yaml"))
	require.NoError(t, err)
	tmpl, err := template.ParseFiles(filepath.Join(root, "qemu-tests", "testdata", "cluster-upgrade.yaml.tmpl"))
	require.NoError(t, err)
	current := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(def.Bundles[0]), "kubernetes-"), ".yaml")
	prevVersions, err := os.ReadFile(filepath.Join(root, "components", "previous", "versions.yaml"))
	require.NoError(t, err)
	previous := regexp.MustCompile(`(?m)^kubernetes: (v\S+)`).FindSubmatch(prevVersions)
	require.NotNil(t, previous, "components/previous/versions.yaml names its kubernetes")
	priv, _, err := signature.GenerateKey()
	require.NoError(t, err)
	pemKey, err := signature.MarshalPrivateKey(priv)
	require.NoError(t, err)
	key := filepath.Join(t.TempDir(), "build.key")
	require.NoError(t, os.WriteFile(key, pemKey, 0o600))

	for _, tt := range []struct {
		name, kubernetes, components string
	}{
		{"previous", string(previous[1]), "components/previous"},
		{"current", current, "components"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "spec.yaml")
			f, err := os.Create(path)
			require.NoError(t, err)
			require.NoError(t, tmpl.Execute(f, map[string]string{"Repo": root, "Version": "0.1.0", "Faults": "",
				"Kubernetes": tt.kubernetes, "KubernetesComponents": tt.components, "Key": key}))
			require.NoError(t, f.Close())
			s, err := Parse(path)
			require.NoError(t, err)
			assert.Equal(t, def.OS.Packages, s.OS.Packages, "the default image's system")
			assert.Equal(t, def.OS.Enable, s.OS.Enable)
			assert.Equal(t, 1, s.Boot.Tries, "a failed trial falls back at once")
			assert.Equal(t, def.Boot.TimeoutSeconds, s.Boot.TimeoutSeconds)
			assert.Equal(t, def.Kernel, s.Kernel)
			assert.Equal(t, def.Resolve(def.OS.Overlay), s.Resolve(s.OS.Overlay))
			assert.Equal(t, []string{filepath.Join(root, "bundles", "kubernetes-"+tt.kubernetes+".yaml"), filepath.Join(root, "bundles", "test-apps.yaml")}, s.Bundles)
			assert.FileExists(t, s.Bundles[0], "make pin-previous writes the previous release's bundle")
			require.Len(t, s.Components, len(def.Components))
			for i, c := range def.Components {
				want := c
				want.Component = def.Resolve(c.Component)
				if strings.HasSuffix(c.Component, "/kubernetes") {
					want.Component = filepath.Join(root, tt.components, "kubernetes")
				}
				assert.Equal(t, want, s.Components[i])
			}
		})
	}
	assert.NotEqual(t, current, string(previous[1]), "the previous release differs from the default")
}
