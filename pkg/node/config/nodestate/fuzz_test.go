package nodestate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds journals (the seed corpus is in testdata/fuzz/FuzzLoad)
// to Load: a corrupt journal gives an error naming the file, never a
// panic; a journal that loads can be saved, and loads back the same; and
// the journal's methods work on whatever loaded.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"boots": [`))
	dir := f.TempDir() // one per worker: a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "journal.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := Load(path)
		if err != nil {
			if j != nil {
				t.Fatalf("Load failed (%v) but returned a journal", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		again := filepath.Join(dir, "again", "journal.json")
		if err := j.Save(again); err != nil {
			t.Fatalf("a loaded journal cannot be saved: %v", err)
		}
		j2, err := Load(again)
		if err != nil {
			t.Fatalf("Load of a saved journal: %v", err)
		}
		a, errA := json.Marshal(j)
		b, errB := json.Marshal(j2)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Fatalf("save and load changed the journal (%v, %v):\n%s\n%s", errA, errB, a, b)
		}
		if e := j.Enrollment; e != nil {
			_ = e.Summary()
		}
		_ = j.Kubeadm.IsDone("init")
		if n := len(j.Boots); n > 0 {
			if cur := j.Current(j.Boots[n-1].BootID, "a"); cur != &j.Boots[n-1] {
				t.Fatalf("Current of the last boot's ID made a new record")
			}
		}
		if cur := j.Current("fuzz-new-boot", "b"); cur.BootID != "fuzz-new-boot" {
			t.Fatalf("Current returned boot %q, not the one asked for", cur.BootID)
		}
	})
}
