package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadOSLock feeds OS lock files (os.lock) to ReadOSLock: it never
// panics, its errors name the file, and a lock it accepts is written back
// by WriteOSLock and read again unchanged.
func FuzzReadOSLock(f *testing.F) {
	f.Add([]byte("apiVersion: terrarium.dev/v1alpha1\nkind: DebianLock\nsuite: trixie\nmirror: http://deb.debian.org/debian\npackages: [systemd]\n" +
		"lock:\n  - package: systemd\n    version: 257.9-1\n    file: pool/main/s/systemd/systemd_257.9-1_amd64.deb\n    sha256: " + strings.Repeat("ab", 32) + "\n"))
	f.Add([]byte("kind: DebianLock\nlock: []\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.lock.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := ReadOSLock(path)
		if err != nil {
			if l != nil {
				t.Fatalf("ReadOSLock failed (%v) but returned a lock", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		again := filepath.Join(dir, "again.lock.yaml")
		if err := WriteOSLock(again, l); err != nil {
			t.Fatalf("WriteOSLock of an accepted lock: %v", err)
		}
		l2, err := ReadOSLock(again)
		if err != nil {
			t.Fatalf("ReadOSLock of the written lock: %v", err)
		}
		if len(l2.Lock) != len(l.Lock) || l2.Suite != l.Suite || strings.Join(l2.Packages, ",") != strings.Join(l.Packages, ",") {
			t.Fatalf("round trip changed the lock:\n got %+v\nwant %+v", l2, l)
		}
		for i := range l.Lock {
			if l.Lock[i] != l2.Lock[i] {
				t.Fatalf("round trip changed lock[%d]: %+v != %+v", i, l2.Lock[i], l.Lock[i])
			}
		}
	})
}
