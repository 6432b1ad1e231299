package bundle

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"gopkg.in/yaml.v3"
)

// FuzzParse feeds bundle files (the seed corpus is in
// testdata/fuzz/FuzzParse) to Parse: it never panics, its errors name the
// file, a bundle it accepts holds only what Resolve can use (platforms,
// image names and pinned references that parse), and, marshalled back to
// YAML, it parses to the same bundle.
func FuzzParse(f *testing.F) {
	dir := f.TempDir() // one per worker: a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "bundle.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := Parse(path)
		if err != nil {
			if b != nil {
				t.Fatalf("Parse failed (%v) but returned a bundle", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkUsable(t, b)
		out, err := yaml.Marshal(b)
		if err != nil {
			t.Fatalf("marshal a parsed bundle: %v", err)
		}
		again := filepath.Join(dir, "again.yaml")
		if err := os.WriteFile(again, out, 0o644); err != nil {
			t.Fatal(err)
		}
		b2, err := Parse(again)
		if err != nil {
			t.Fatalf("Parse of the re-marshalled bundle: %v\n%s", err, out)
		}
		b2.file = b.file
		if !reflect.DeepEqual(b2, b) {
			t.Fatalf("round trip changed the bundle:\n got %+v\nwant %+v", b2, b)
		}
	})
}

// checkUsable fails t when a validated bundle holds something Resolve
// cannot parse.
func checkUsable(t *testing.T, b *Bundle) {
	t.Helper()
	if _, err := parsePlatforms(b.Platforms); err != nil {
		t.Fatalf("validated platforms do not parse: %v", err)
	}
	for _, img := range b.Images {
		if _, err := name.NewTag(img.Name, name.StrictValidation); err != nil {
			t.Fatalf("validated image name %q does not parse: %v", img.Name, err)
		}
		if r := img.Source.Registry; r != nil {
			if _, err := name.NewDigest(r.Ref, name.StrictValidation); err != nil {
				t.Fatalf("validated registry ref %q does not parse: %v", r.Ref, err)
			}
		}
	}
}

// FuzzPackagesIndex feeds Debian Packages indexes (the seed corpus is in
// testdata/fuzz/FuzzPackagesIndex) to parsePackagesIndex: it never panics,
// and every entry it keeps is complete, keyed by its sha256, and made of
// trimmed values from one line each.
func FuzzPackagesIndex(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		out := map[string]DebianPackage{}
		if err := parsePackagesIndex(strings.NewReader(string(data)), out); err != nil {
			return
		}
		for sum, p := range out {
			if p.Package == "" || p.File == "" || p.SHA256 != sum {
				t.Fatalf("incomplete entry under %q: %+v", sum, p)
			}
			for _, v := range []string{p.Package, p.Version, p.File, p.SHA256} {
				if strings.Contains(v, "\n") || strings.TrimSpace(v) != v {
					t.Fatalf("entry value %q is not one trimmed line: %+v", v, p)
				}
			}
		}
	})
}
