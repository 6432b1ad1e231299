package backup

import (
	"bytes"
	"os"
	"testing"
)

// FuzzExtractTar feeds arbitrary archives (what a TERRA-BACKUP stick's
// file decrypts to) to the extractor: it must return an error or a
// manifest, never panic, and never write outside its directory.
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
		_, _ = extractTar(bytes.NewReader(b), root)
	})
}

// FuzzParseManifest checks the manifest parser on arbitrary JSON.
func FuzzParseManifest(f *testing.F) {
	f.Add(goodMembers(f)[0].body)
	f.Add([]byte(`{"apiVersion":"terrarium.dev/v1alpha1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err == nil && m == nil {
			t.Fatal("no manifest and no error")
		}
	})
}
