package squashfs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireTool fails (never skips) when a tool the tests need is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): run make deps", name, err)
	}
	return p
}

// makeTree writes a small root filesystem.
func makeTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	files := []struct {
		name, content string
		mode          os.FileMode
	}{
		{"etc/hostname", "terrarium\n", 0o644},
		{"etc/os-release", "ID=terrarium\n", 0o644},
		{"usr/bin/tool", "#!/bin/sh\necho hi\n", 0o755},
		{"usr/lib/terrarium/release.json", `{"version":"0.1.0"}` + "\n", 0o644},
		{"usr/share/big", strings.Repeat("compressible ", 200000), 0o644},
	}
	for _, f := range files {
		p := filepath.Join(root, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "var", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	return root
}

var epoch = time.Unix(1767225600, 0)

func make1(t *testing.T, dir, out string, epoch time.Time) []byte {
	t.Helper()
	if err := Make(context.Background(), dir, out, epoch); err != nil {
		t.Fatalf("Make: %v", err)
	}
	if _, err := os.Stat(out + ".partial"); !os.IsNotExist(err) {
		t.Errorf("%s.partial left behind: %v", out, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMakeReproducible(t *testing.T) {
	requireTool(t, "mksquashfs")
	tree := makeTree(t)
	dir := t.TempDir()
	first := make1(t, tree, filepath.Join(dir, "one.squashfs"), epoch)

	// Touch the tree: mtimes must not leak into the image. A
	// SOURCE_DATE_EPOCH in the environment must not break mksquashfs,
	// which refuses it together with -mkfs-time/-all-time.
	later := time.Now().Add(time.Hour)
	if err := filepath.Walk(tree, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, later, later)
	}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1000")
	second := make1(t, tree, filepath.Join(dir, "two.squashfs"), epoch)
	if !bytes.Equal(first, second) {
		t.Errorf("two Makes of the same tree differ (%d vs %d bytes)", len(first), len(second))
	}
	if string(first[:4]) != "hsqs" {
		t.Errorf("output does not start with the squashfs magic: %q", first[:4])
	}

	// Another epoch must change the image, or the comparison proves nothing.
	third := make1(t, tree, filepath.Join(dir, "three.squashfs"), epoch.Add(time.Hour))
	if bytes.Equal(first, third) {
		t.Error("another epoch gave the same image")
	}
}

func TestMakeContents(t *testing.T) {
	unsquashfs := requireTool(t, "unsquashfs")
	requireTool(t, "mksquashfs")
	tree := makeTree(t)
	out := filepath.Join(t.TempDir(), "slot.squashfs")
	// An old file at out is replaced, not appended to.
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	make1(t, tree, out, epoch)

	list, err := exec.Command(unsquashfs, "-l", out).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs -l: %v\n%s", err, list)
	}
	for _, want := range []string{
		"squashfs-root/etc/hostname",
		"squashfs-root/etc/os-release",
		"squashfs-root/usr/bin/tool",
		"squashfs-root/usr/lib/terrarium/release.json",
		"squashfs-root/usr/share/big",
		"squashfs-root/var/empty",
		"squashfs-root/bin",
	} {
		if !bytes.Contains(list, []byte(want+"\n")) {
			t.Errorf("unsquashfs -l does not list %s:\n%s", want, list)
		}
	}

	// Modes, the symlink and the fixed time survive.
	long, err := exec.Command(unsquashfs, "-lln", out).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs -lln: %v\n%s", err, long)
	}
	stamp := epoch.UTC().Format("2006-01-02 15:04")
	for _, want := range []string{"-rwxr-xr-x", "-rw-r--r--", "lrwxrwxrwx", "squashfs-root/bin -> usr/bin"} {
		if !bytes.Contains(long, []byte(want)) {
			t.Errorf("unsquashfs -lln lacks %q:\n%s", want, long)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(long)), "\n") {
		if !strings.Contains(line, "squashfs-root") {
			continue
		}
		if !strings.Contains(line, stamp) && !strings.Contains(line, epoch.Local().Format("2006-01-02 15:04")) {
			t.Errorf("entry not stamped %s: %s", stamp, line)
		}
	}

	// Content round trip.
	dest := filepath.Join(t.TempDir(), "x")
	if b, err := exec.Command(unsquashfs, "-d", dest, "-no-progress", out).CombinedOutput(); err != nil {
		t.Fatalf("unsquashfs: %v\n%s", err, b)
	}
	for _, f := range []string{"etc/hostname", "usr/share/big"} {
		want, _ := os.ReadFile(filepath.Join(tree, f))
		got, err := os.ReadFile(filepath.Join(dest, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after unsquashfs: %d bytes, %v; want %d bytes", f, len(got), err, len(want))
		}
	}
	// zstd-compressed as documented.
	sb, err := exec.Command(unsquashfs, "-s", out).CombinedOutput()
	if err != nil || !bytes.Contains(sb, []byte("Compression zstd")) {
		t.Errorf("unsquashfs -s: %v; want zstd compression:\n%s", err, sb)
	}
}

func TestMakeError(t *testing.T) {
	requireTool(t, "mksquashfs")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.squashfs")
	missing := filepath.Join(dir, "no-such-tree")
	err := Make(context.Background(), missing, out, epoch)
	if err == nil {
		t.Fatal("Make of a missing tree succeeded")
	}
	if !strings.Contains(err.Error(), "mksquashfs") || !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q should name mksquashfs and the tree", err)
	}
	for _, p := range []string{out, out + ".partial"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a failed Make (%v)", p, err)
		}
	}
}

func TestMakeCanceled(t *testing.T) {
	requireTool(t, "mksquashfs")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "out.squashfs")
	if err := Make(ctx, makeTree(t), out, epoch); err == nil {
		t.Error("Make with a canceled context succeeded")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists after a canceled Make (%v)", out, err)
	}
}
