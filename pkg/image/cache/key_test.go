package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// makeTree writes a small tree with a file, an executable in a
// subdirectory, an empty directory and a symlink, with explicit modes so
// the umask does not matter.
func makeTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{root, filepath.Join(root, "sub"), filepath.Join(root, "empty")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := []struct {
		name, content string
		mode          os.FileMode
	}{
		{"a.txt", "hello\n", 0o644},
		{"sub/tool", "#!/bin/sh\n", 0o755},
	}
	for _, f := range files {
		p := filepath.Join(root, f.name)
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// inputs holds every kind of input a key takes.
type inputs struct {
	file, tree string
}

func newInputs(t *testing.T) inputs {
	t.Helper()
	file := filepath.Join(t.TempDir(), "input.bin")
	if err := os.WriteFile(file, []byte("input file"), 0o644); err != nil {
		t.Fatal(err)
	}
	return inputs{file: file, tree: makeTree(t)}
}

func baseKey(in inputs) *Key {
	return NewKey("rootfs").
		String("suite", "trixie").
		Strings("packages", []string{"systemd", "kmod"}).
		File("init", in.file).
		Tree("overlay", in.tree)
}

func mustSum(t *testing.T, k *Key) string {
	t.Helper()
	s, err := k.Sum()
	if err != nil {
		t.Fatalf("Sum: %v", err)
	}
	return s
}

func TestKeyStable(t *testing.T) {
	a, b := newInputs(t), newInputs(t) // same content, different directories
	ka, kb := mustSum(t, baseKey(a)), mustSum(t, baseKey(b))
	if ka != kb {
		t.Errorf("same inputs in different places give different keys: %s vs %s", ka, kb)
	}
	if again := mustSum(t, baseKey(a)); again != ka {
		t.Errorf("key not stable across calls: %s vs %s", ka, again)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(ka) {
		t.Errorf("key %q is not 64 hex digits", ka)
	}
}

func TestKeySensitivity(t *testing.T) {
	tests := []struct {
		name string
		// key builds a key from the (possibly modified) inputs.
		key func(in inputs) *Key
		// modify changes the inputs on disk before key is called.
		modify func(t *testing.T, in inputs)
	}{
		{name: "kind", key: func(in inputs) *Key {
			return NewKey("initramfs").String("suite", "trixie").Strings("packages", []string{"systemd", "kmod"}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "string value", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "forky").Strings("packages", []string{"systemd", "kmod"}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "string name", key: func(in inputs) *Key {
			return NewKey("rootfs").String("release", "trixie").Strings("packages", []string{"systemd", "kmod"}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "strings element", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "trixie").Strings("packages", []string{"systemd", "udev"}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "strings order", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "trixie").Strings("packages", []string{"kmod", "systemd"}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "strings extra", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "trixie").Strings("packages", []string{"systemd", "kmod", ""}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "strings name", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "trixie").Strings("pkgs", []string{"systemd", "kmod"}).File("init", in.file).Tree("overlay", in.tree)
		}},
		{name: "file name", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "trixie").Strings("packages", []string{"systemd", "kmod"}).File("busybox", in.file).Tree("overlay", in.tree)
		}},
		{name: "tree name", key: func(in inputs) *Key {
			return NewKey("rootfs").String("suite", "trixie").Strings("packages", []string{"systemd", "kmod"}).File("init", in.file).Tree("files", in.tree)
		}},
		{name: "file content", modify: func(t *testing.T, in inputs) {
			write(t, in.file, "input filE", 0o644)
		}},
		{name: "tree file content", modify: func(t *testing.T, in inputs) {
			write(t, filepath.Join(in.tree, "a.txt"), "hellO\n", 0o644)
		}},
		{name: "tree file mode", modify: func(t *testing.T, in inputs) {
			if err := os.Chmod(filepath.Join(in.tree, "a.txt"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "tree dir mode", modify: func(t *testing.T, in inputs) {
			if err := os.Chmod(filepath.Join(in.tree, "empty"), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "tree symlink target", modify: func(t *testing.T, in inputs) {
			link := filepath.Join(in.tree, "link")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("sub/tool", link); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "tree symlink replaced by file", modify: func(t *testing.T, in inputs) {
			link := filepath.Join(in.tree, "link")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			write(t, link, "a.txt", 0o777)
		}},
		{name: "tree file added", modify: func(t *testing.T, in inputs) {
			write(t, filepath.Join(in.tree, "sub", "new"), "", 0o644)
		}},
		{name: "tree empty dir added", modify: func(t *testing.T, in inputs) {
			if err := os.Mkdir(filepath.Join(in.tree, "empty", "more"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "tree file removed", modify: func(t *testing.T, in inputs) {
			if err := os.Remove(filepath.Join(in.tree, "sub", "tool")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "tree file renamed", modify: func(t *testing.T, in inputs) {
			if err := os.Rename(filepath.Join(in.tree, "a.txt"), filepath.Join(in.tree, "b.txt")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	base := mustSum(t, baseKey(newInputs(t)))
	seen := map[string]string{"base": base}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newInputs(t)
			if tt.modify != nil {
				tt.modify(t, in)
			}
			key := baseKey
			if tt.key != nil {
				key = tt.key
			}
			got := mustSum(t, key(in))
			for other, sum := range seen {
				if sum == got {
					t.Errorf("key equals the key of %q: %s", other, got)
				}
			}
			seen[tt.name] = got
		})
	}
}

// TestKeyFraming checks that inputs are framed, so that moving bytes
// between names, values and list elements changes the key.
func TestKeyFraming(t *testing.T) {
	pairs := []struct {
		name string
		a, b *Key
	}{
		{"name/value boundary", NewKey("k").String("ab", "c"), NewKey("k").String("a", "bc")},
		{"list split", NewKey("k").Strings("l", []string{"a b"}), NewKey("k").Strings("l", []string{"a", "b"})},
		{"list join", NewKey("k").Strings("l", []string{"ab", ""}), NewKey("k").Strings("l", []string{"a", "b"})},
		{"newline in value", NewKey("k").String("a", "x\n1:b=1:y"), NewKey("k").String("a", "x").String("b", "y")},
		{"empty list vs none", NewKey("k").Strings("l", nil), NewKey("k")},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			if a, b := mustSum(t, p.a), mustSum(t, p.b); a == b {
				t.Errorf("keys collide: %s", a)
			}
		})
	}
}

func TestKeyErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name string
		key  *Key
	}{
		{"missing file", NewKey("k").File("init", missing)},
		{"missing tree", NewKey("k").Tree("overlay", missing)},
		{"error sticks", NewKey("k").File("init", missing).String("a", "b").Tree("t", t.TempDir())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum, err := tt.key.Sum()
			if err == nil {
				t.Fatalf("Sum = %s, want an error", sum)
			}
			if sum != "" {
				t.Errorf("Sum returned %q along with the error", sum)
			}
			if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "hash input") {
				t.Errorf("error %v: want a wrapped not-exist error saying \"hash input\"", err)
			}
		})
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
