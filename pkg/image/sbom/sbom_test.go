package sbom

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func inputs() Inputs {
	return Inputs{
		Name: "terrarium", Version: "0.2.0", Epoch: time.Unix(1767225600, 0), Suite: "trixie",
		Debian: map[string]string{"systemd": "257.9-1~deb13u1", "libc6": "2.41-12", "e2fsprogs": "1.47.2-3+b3", "sudo": "1:1.9.16p2-3"},
		Programs: []Program{
			{Module: "k8s.io/kubernetes@v1.36.3", Path: "/usr/bin/kubelet"},
			{Module: "k8s.io/kubernetes@v1.36.3", Path: "/usr/bin/kubeadm"},
			{Module: "github.com/containerd/containerd/v2@v2.3.7", Path: "/usr/bin/containerd"},
			{Module: "github.com/terrarium-os/terrarium/components/cni-plugins", Path: "/usr/lib/cni/flannel"},
		},
		Images: []Image{
			{Name: "registry.k8s.io/pause:3.10.2", Digest: "sha256:f7dd4446eba292c7e68623d21be933d1d806f9773595be9ab206d3ca283e8c4e"},
			{Name: "registry.k8s.io/coredns/coredns:v1.14.2", Digest: "sha256:9d0326b4b998019fe01ae88408608f25155d8a088bd8aa643a9addcd7feab934"},
			{Name: "localhost:5000/app:1.0", Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000001"},
		},
	}
}

func TestWriteGolden(t *testing.T) {
	var a, b bytes.Buffer
	_, err := Write(&a, inputs())
	require.NoError(t, err)
	in := inputs()
	in.Images[0], in.Images[2] = in.Images[2], in.Images[0] // order does not matter
	_, err = Write(&b, in)
	require.NoError(t, err)
	assert.Equal(t, a.String(), b.String(), "the same content gives the same bytes")

	golden := filepath.Join("testdata", "sbom.golden.json")
	if *update {
		require.NoError(t, os.WriteFile(golden, a.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -update to write it")
	assert.Equal(t, string(want), a.String())
}

func TestBOMContents(t *testing.T) {
	var buf bytes.Buffer
	n, err := Write(&buf, inputs())
	require.NoError(t, err)
	assert.Equal(t, 4+3+3, n, "Write counts what it lists")
	var bom cdx.BOM
	require.NoError(t, cdx.NewBOMDecoder(&buf, cdx.BOMFileFormatJSON).Decode(&bom))
	assert.Equal(t, cdx.SpecVersion1_6, bom.SpecVersion)
	assert.Equal(t, "2026-01-01T00:00:00Z", bom.Metadata.Timestamp)
	assert.Regexp(t, `^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, bom.SerialNumber)
	purls := map[string]cdx.Component{}
	for _, c := range *bom.Components {
		purls[c.PackageURL] = c
	}
	assert.Len(t, purls, 4+3+3, "a component per package, module and image")
	for _, want := range []string{
		"pkg:deb/debian/sudo@1%3A1.9.16p2-3?arch=amd64&distro=debian-trixie",
		"pkg:deb/debian/e2fsprogs@1.47.2-3%2Bb3?arch=amd64&distro=debian-trixie",
		"pkg:deb/debian/systemd@257.9-1~deb13u1?arch=amd64&distro=debian-trixie",
		"pkg:golang/k8s.io/kubernetes@v1.36.3",
		"pkg:golang/github.com/terrarium-os/terrarium/components/cni-plugins",
		"pkg:oci/coredns@sha256%3A9d0326b4b998019fe01ae88408608f25155d8a088bd8aa643a9addcd7feab934?repository_url=registry.k8s.io/coredns/coredns&tag=v1.14.2",
		"pkg:oci/app@sha256%3A0000000000000000000000000000000000000000000000000000000000000001?repository_url=localhost%3A5000/app&tag=1.0",
	} {
		assert.Contains(t, purls, want)
	}
	kube := purls["pkg:golang/k8s.io/kubernetes@v1.36.3"]
	require.NotNil(t, kube.Properties)
	assert.Equal(t, []cdx.Property{{Name: "terrarium:installed", Value: "/usr/bin/kubeadm"}, {Name: "terrarium:installed", Value: "/usr/bin/kubelet"}}, *kube.Properties)

	later := inputs()
	later.Epoch = later.Epoch.Add(time.Hour)
	other, err := Build(later)
	require.NoError(t, err)
	assert.NotEqual(t, bom.SerialNumber, other.SerialNumber, "another build, another serial number")
}

func TestBuildErrors(t *testing.T) {
	for name, mutate := range map[string]func(*Inputs){
		"a digest that is not sha256": func(in *Inputs) { in.Images[0].Digest = "md5:abc" },
		"an image without a tag":      func(in *Inputs) { in.Images[0].Name = "registry.k8s.io/pause" },
		"an image without a host":     func(in *Inputs) { in.Images[0].Name = "pause:3.10" },
		"a program without a module":  func(in *Inputs) { in.Programs[0].Module = "" },
		"nothing at all":              func(in *Inputs) { *in = Inputs{Name: "x", Version: "1"} },
	} {
		t.Run(name, func(t *testing.T) {
			in := inputs()
			mutate(&in)
			_, err := Write(&bytes.Buffer{}, in)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "SBOM: "), err.Error())
		})
	}
}

// TestValidatesAgainstSchema: the SBOM is valid CycloneDX 1.6, checked
// against the specification's JSON schema and the schemas it refers to
// (shipped with cyclonedx-go; loaded from disk, never fetched).
func TestValidatesAgainstSchema(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/CycloneDX/cyclonedx-go").Output()
	require.NoError(t, err, "locate cyclonedx-go's module")
	dir := filepath.Join(strings.TrimSpace(string(out)), "schema")
	file := func(name string) gojsonschema.JSONLoader {
		return gojsonschema.NewReferenceLoader("file://" + filepath.Join(dir, name))
	}
	sl := gojsonschema.NewSchemaLoader()
	require.NoError(t, sl.AddSchema("http://cyclonedx.org/schema/spdx.schema.json", file("spdx.schema.json")))
	require.NoError(t, sl.AddSchema("http://cyclonedx.org/schema/jsf-0.82.schema.json", file("jsf-0.82.schemax.json")))
	schema, err := sl.Compile(file("bom-1.6.schema.json"))
	require.NoError(t, err)

	var buf bytes.Buffer
	_, err = Write(&buf, inputs())
	require.NoError(t, err)
	res, err := schema.Validate(gojsonschema.NewBytesLoader(buf.Bytes()))
	require.NoError(t, err)
	for _, e := range res.Errors() {
		t.Errorf("schema: %s", e)
	}
	assert.True(t, res.Valid())

	// The check can fail: a component without a type is not CycloneDX.
	bad := bytes.Replace(buf.Bytes(), []byte(`"type": "library",`), nil, 1)
	res, err = schema.Validate(gojsonschema.NewBytesLoader(bad))
	require.NoError(t, err)
	assert.False(t, res.Valid(), "a component without a type passes the schema")
}
