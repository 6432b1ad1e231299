package volume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzMinSize is the smallest image FuzzOpen hands to Open: inputs are
// padded with zeros to a multiple of it, so that the seeds (small FAT and
// ISO9660 images) are committed without their trailing zeros.
const fuzzMinSize = 64 << 10

// fuzzReads are the files config sources read from a volume, each with a
// cap (some small enough that a seed's file exceeds it).
var fuzzReads = []struct {
	name  string
	limit int64
}{
	{"machine.yaml", 1 << 10},
	{"machine.yaml.sig", 16},
	{"user-data", 1 << 10},
	{"META-DATA", 1 << 10},
	{"network-config", 8},
	{"openstack/latest/meta_data.json", 1 << 10},
	{"openstack/latest/network_data.json", 1 << 10},
	{"../../etc/passwd", 1 << 10},
}

// FuzzOpen writes each input, as a volume image, to a file (the seed
// corpus in testdata/fuzz/FuzzOpen holds FAT12 and ISO9660 volumes) and
// reads the config sources' files from it: no panic of the filesystem
// library escapes Open or ReadFile, every error names the image, and
// ReadFile never returns more than its limit.
func FuzzOpen(f *testing.F) {
	f.Add([]byte("not a filesystem"))
	path := filepath.Join(f.TempDir(), "volume.img") // one per worker
	f.Fuzz(func(t *testing.T, data []byte) {
		img := make([]byte, (len(data)/fuzzMinSize+1)*fuzzMinSize)
		copy(img, data)
		if err := os.WriteFile(path, img, 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := Open(path)
		if err != nil {
			if v != nil {
				t.Fatalf("Open failed (%v) but returned a volume", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the image: %v", err)
			}
			return
		}
		defer v.Close()
		for _, r := range fuzzReads {
			got, err := v.ReadFile(r.name, r.limit)
			if err != nil {
				if got != nil {
					t.Fatalf("ReadFile(%s) failed (%v) but returned data", r.name, err)
				}
				if !strings.Contains(err.Error(), path) {
					t.Fatalf("ReadFile(%s): error does not name the image: %v", r.name, err)
				}
				continue
			}
			if int64(len(got)) > r.limit {
				t.Fatalf("ReadFile(%s) returned %d bytes, more than its limit %d", r.name, len(got), r.limit)
			}
		}
	})
}
