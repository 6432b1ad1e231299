package machineconfig

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// FuzzParse feeds machine configs (the seed corpus is in
// testdata/fuzz/FuzzParse) to Parse: it never panics, its errors name the
// file, and a config it accepts re-marshals to a canonical form that parses
// back to the same config and digest.
func FuzzParse(f *testing.F) {
	f.Add([]byte("apiVersion: " + APIVersion + "\nkind: " + Kind + "\nhostname: node-1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("machine.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse failed (%v) but returned a config", err)
			}
			if !strings.HasPrefix(err.Error(), "machine.yaml: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			var problems strictyaml.Problems
			if errors.As(err, &problems) && len(problems) == 0 {
				t.Fatalf("error %q holds no problems", err)
			}
			return
		}
		canonical, err := cfg.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed config: %v", err)
		}
		again, err := Parse("canonical.yaml", canonical)
		if err != nil {
			t.Fatalf("Parse(Marshal()): %v\n%s", err, canonical)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", again, cfg)
		}
		if again.Digest() != cfg.Digest() {
			t.Fatalf("round trip changed the digest")
		}
		if twice, err := again.Marshal(); err != nil || !bytes.Equal(twice, canonical) {
			t.Fatalf("canonical form is not a fixed point (%v):\n%s\n%s", err, canonical, twice)
		}
	})
}
