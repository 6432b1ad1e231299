package clustersecrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// FuzzLoad feeds cluster secrets files to Load. The committed seed corpus
// (testdata/fuzz/FuzzLoad) holds no keys; a whole, valid file is added
// here from the shared generated secrets. Load never panics; its errors
// name the file, and problems with the document come as Problems; and, as
// Save promises, saving what Load returns gives the same bytes again.
func FuzzLoad(f *testing.F) {
	if s, err := shared(); err == nil {
		if data, err := encode(s); err == nil {
			f.Add(data)
		}
	}
	dir := f.TempDir() // one per worker: a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "cluster.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Load(path)
		if err != nil {
			if s != nil {
				t.Fatalf("Load failed (%v) but returned secrets", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			var ps strictyaml.Problems
			if errors.As(err, &ps) && len(ps) == 0 {
				t.Fatalf("error %q holds no problems", err)
			}
			return
		}
		first, err := encode(s)
		if err != nil {
			t.Fatalf("secrets that Load accepts cannot be saved: %v", err)
		}
		again := filepath.Join(dir, "again.yaml")
		if err := Save(again, s); err != nil {
			t.Fatalf("Save: %v", err)
		}
		s2, err := Load(again)
		if err != nil {
			t.Fatalf("Load of saved secrets: %v", err)
		}
		second, err := encode(s2)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("save and load changed the secrets (%v):\n%s\n---\n%s", err, first, second)
		}
	})
}
