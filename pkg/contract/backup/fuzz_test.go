package backup

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// FuzzExtractTar feeds arbitrary archives (what a TERRA-BACKUP stick's
// file decrypts to) to the extractor: it returns an error or a manifest,
// never panics, writes only inside its directory (os.Root), and what it
// accepts is whole: every member the manifest lists, of its size.
func FuzzExtractTar(f *testing.F) {
	f.Add(tarOf(f, goodMembers(f)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		m, err := extractTar(bytes.NewReader(b), root)
		if err != nil {
			return
		}
		fi, err := root.Stat(SnapshotName)
		if err != nil || fi.Size() != m.Snapshot.Size {
			t.Fatalf("accepted an archive without its snapshot of %d bytes: %v %v", m.Snapshot.Size, fi, err)
		}
		for name, want := range m.PKI {
			fi, err := root.Stat(PKIDir + "/" + name)
			if err != nil || fi.Size() != want.Size {
				t.Fatalf("accepted an archive without pki/%s of %d bytes: %v", name, want.Size, err)
			}
		}
	})
}

// FuzzParseManifest checks the manifest parser on arbitrary JSON: what it
// accepts survives a round trip through JSON unchanged.
func FuzzParseManifest(f *testing.F) {
	f.Add(goodMembers(f)[0].body)
	f.Add([]byte(`{"apiVersion":"terrarium.dev/v1alpha1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(again)
		if err != nil {
			t.Fatalf("an accepted manifest does not parse again: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("the round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
	})
}
