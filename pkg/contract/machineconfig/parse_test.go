package machineconfig

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with the golden file at path, or rewrites the file
// when the -update flag is set.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (run go test with -update to accept it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// testFiles returns the YAML files in dir, keyed by name without extension.
func testFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no test files in testdata/%s: %v", dir, err)
	}
	files := map[string]string{}
	for _, p := range paths {
		files[strings.TrimSuffix(filepath.Base(p), ".yaml")] = p
	}
	return files
}

func TestParseValid(t *testing.T) {
	for name, path := range testFiles(t, "valid") {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse("machine.yaml", data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			canonical, err := cfg.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			golden(t, strings.TrimSuffix(path, ".yaml")+".golden", canonical)

			again, err := Parse("canonical.yaml", canonical)
			if err != nil {
				t.Fatalf("Parse(Marshal()): %v\n%s", err, canonical)
			}
			if !reflect.DeepEqual(again, cfg) {
				t.Errorf("round trip changed the config:\n got %+v\nwant %+v", again, cfg)
			}
			if again.Digest() != cfg.Digest() {
				t.Errorf("round trip changed the digest")
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	for name, path := range testFiles(t, "invalid") {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse("machine.yaml", data)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", cfg)
			}
			var problems strictyaml.Problems
			if !errors.As(err, &problems) || len(problems) == 0 {
				t.Errorf("error %T does not unwrap to strictyaml.Problems", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "machine.yaml: $") {
					t.Errorf("error line %q does not start with the file name and a path", line)
				}
			}
			golden(t, strings.TrimSuffix(path, ".yaml")+".golden", []byte(err.Error()+"\n"))
		})
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	data := []byte("apiVersion: terrarium.dev/v1alpha1\nkind: MachineConfig\nhostname: n\n" +
		"admin:\n  sshAuthorizedKeys: [\"" + testKey + "\"]\n")
	cfg, err := Parse("machine.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin.Name != DefaultAdminName {
		t.Errorf("admin name = %q, want %q", cfg.Admin.Name, DefaultAdminName)
	}
}
