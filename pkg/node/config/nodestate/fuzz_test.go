package nodestate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds journals (the seed corpus is in testdata/fuzz/FuzzLoad)
// to the journal's readers: a corrupt journal gives an error naming the
// file, never a panic; a newer build's is read but not opened for writing;
// a journal that opens can be saved, and loads back the same; and the
// journal's methods work on whatever loaded.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"boots": [`))
	f.Add([]byte(`{"schema": 3, "boots": [], "future": {"x": 1}}`))
	dir := f.TempDir() // one per worker: a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		root := filepath.Join(dir, "state")
		path := filepath.Join(root, "terrarium", "journal.json")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := At(root).ReadJournal()
		if err != nil {
			if j != nil {
				t.Fatalf("ReadJournal failed (%v) but returned a journal", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		s, err := At(root).OpenJournal()
		if j.Schema > Schema {
			if !errors.Is(err, ErrNewerSchema) {
				t.Fatalf("OpenJournal of schema %d = %v, want ErrNewerSchema", j.Schema, err)
			}
			if after, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(after, data) {
				t.Fatalf("a newer journal was changed (%v)", rerr)
			}
			return
		}
		if err != nil {
			t.Fatalf("ReadJournal read it, OpenJournal refused it: %v", err)
		}
		again := filepath.Join(dir, "again")
		s2, err := At(again).OpenJournal()
		if err != nil {
			t.Fatal(err)
		}
		s.Read(func(loaded *Journal) {
			err = s2.Update(func(cur *Journal) { *cur = *loaded })
		})
		if err != nil {
			t.Fatalf("a loaded journal cannot be saved: %v", err)
		}
		j2, err := At(again).ReadJournal()
		if err != nil {
			t.Fatalf("ReadJournal of a saved journal: %v", err)
		}
		var a []byte
		var errA error
		s2.Read(func(saved *Journal) { a, errA = json.Marshal(saved) })
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
