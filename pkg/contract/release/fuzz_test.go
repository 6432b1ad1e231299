package release

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds release.json files (the seed corpus is in
// testdata/fuzz/FuzzLoad) to Load: it never panics, its errors name the
// file, and a release it reads marshals to a canonical form that Load
// reads back to the same release.
func FuzzLoad(f *testing.F) {
	if data, err := sample().Marshal(); err == nil {
		f.Add(data)
	}
	dir := f.TempDir() // one per worker: a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "release.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(path)
		if err != nil {
			if r != nil {
				t.Fatalf("Load failed (%v) but returned a release", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		_ = r.HasFault("health")
		canonical, err := r.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a loaded release: %v", err)
		}
		again := filepath.Join(dir, "again.json")
		if err := os.WriteFile(again, canonical, 0o644); err != nil {
			t.Fatal(err)
		}
		r2, err := Load(again)
		if err != nil {
			t.Fatalf("Load(Marshal()): %v\n%s", err, canonical)
		}
		if twice, err := r2.Marshal(); err != nil || !bytes.Equal(twice, canonical) {
			t.Fatalf("round trip changed the release (%v):\n%s\n%s", err, canonical, twice)
		}
	})
}
