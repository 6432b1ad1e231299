package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParse feeds build specs (the seed corpus is in
// testdata/fuzz/FuzzParse) to Parse, next to an overlay directory, a
// component directory, a bundle file and a base spec to extend: it never panics, its errors name
// the file, and a spec it accepts validates again and, marshalled back to
// YAML, parses to the same spec.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimalSpec))
	f.Add([]byte(fullSpec))
	// One directory per worker: a worker runs its inputs one at a time.
	dir := f.TempDir()
	for _, d := range []string{"overlay", "components/kubelet"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bundle.yaml"), nil, 0o644); err != nil {
		f.Fatal(err)
	}
	// A base for specs that extend one.
	if err := os.WriteFile(filepath.Join(dir, "base.yaml"), []byte(minimalSpec), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("apiVersion: terrarium.dev/v1alpha1\nkind: BuildSpec\nextends: base.yaml\nname: ext\nbundles: [bundle.yaml]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "spec.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Parse(path)
		if err != nil {
			if s != nil {
				t.Fatalf("Parse failed (%v) but returned a spec", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("a parsed spec does not validate: %v", err)
		}
		out, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("marshal a parsed spec: %v", err)
		}
		again, err := Parse(writeFile(t, dir, "again.yaml", string(out)))
		if err != nil {
			t.Fatalf("Parse of the re-marshalled spec: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip changed the spec:\n got %+v\nwant %+v", again, s)
		}
	})
}
