package gobuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// copyComponent copies testdata/hello so a test may change it.
func copyComponent(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("cp", "-a", "testdata/hello", dst).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}
	return dst
}

func newCache(t *testing.T) *cache.Cache {
	t.Helper()
	c, err := cache.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuildStampsVersionsFromGoMod(t *testing.T) {
	ctx := context.Background()
	c, err := Load(ctx, copyComponent(t))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Version("example.com/dep"); v != "v1.2.3" {
		t.Fatalf("Version(example.com/dep) = %q, want v1.2.3", v)
	}
	progs, err := c.Build(ctx, []string{"hello"}, Options{Cache: newCache(t), Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	if len(progs) != 1 || progs[0].Cached || progs[0].Name != "hello" {
		t.Fatalf("programs = %+v, want one freshly built hello", progs)
	}
	out, err := exec.Command(progs[0].Path).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), "v1.2.3/1.2.3/1.2 2026-01-01T00:00:00Z"; got != want {
		t.Fatalf("hello printed %q, want %q", got, want)
	}
}

func TestBuildIsCachedAndReproducible(t *testing.T) {
	ctx := context.Background()
	dir := copyComponent(t)
	c, err := Load(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	cc := newCache(t)
	first, err := c.Build(ctx, []string{"hello"}, Options{Cache: cc, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Build(ctx, []string{"hello"}, Options{Cache: cc, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	if !again[0].Cached || again[0].Path != first[0].Path {
		t.Fatalf("second build = %+v, want the cached %s", again[0], first[0].Path)
	}
	// An empty cache compiles again and must make the same bytes.
	fresh, err := c.Build(ctx, []string{"hello"}, Options{Cache: newCache(t), Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first[0].Path)
	b, _ := os.ReadFile(fresh[0].Path)
	if fresh[0].Cached || !bytes.Equal(a, b) {
		t.Fatalf("rebuild from an empty cache differs (cached=%v, %d vs %d bytes)", fresh[0].Cached, len(a), len(b))
	}
}

func TestKeysFollowInputs(t *testing.T) {
	ctx := context.Background()
	dir := copyComponent(t)
	key := func(e time.Time) string {
		t.Helper()
		c, err := Load(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		k, err := c.Keys(ctx, []string{"hello"}, e)
		if err != nil {
			t.Fatal(err)
		}
		return k[0]
	}
	base := key(epoch)
	if key(epoch) != base {
		t.Fatal("the same inputs give different keys")
	}
	if key(epoch.Add(time.Hour)) == base {
		t.Error("a different build date gives the same key")
	}
	if err := os.WriteFile(filepath.Join(dir, "dep", "dep.go"), []byte("package dep\n\nvar Version = \"changed\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := key(epoch)
	if changed == base {
		t.Error("a changed source file gives the same key")
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(strings.Replace(readFile(t, filepath.Join(dir, "go.mod")), "v1.2.3", "v1.2.4", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if key(epoch) == changed {
		t.Error("a changed go.mod gives the same key")
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("unknown program", func(t *testing.T) {
		c, err := Load(ctx, "testdata/hello")
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Build(ctx, []string{"goodbye"}, Options{Cache: newCache(t), Epoch: epoch})
		if err == nil || !strings.Contains(err.Error(), `has no program "goodbye" (it has hello)`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no component.yaml", func(t *testing.T) {
		_, err := Load(ctx, "testdata/hello/dep")
		if err == nil || !strings.Contains(err.Error(), "component.yaml") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unknown field", func(t *testing.T) {
		dir := copyComponent(t)
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("programs:\n  hello: example.com/hello/cmd/hello\nldflag: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(ctx, dir)
		if err == nil || !strings.Contains(err.Error(), "component.yaml: $.ldflag") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("version of a module go.mod lacks", func(t *testing.T) {
		dir := copyComponent(t)
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("programs:\n  hello: example.com/hello/cmd/hello\nldflags: ['-X main.v={{version \"example.com/other\"}}']\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Build(ctx, []string{"hello"}, Options{Cache: newCache(t), Epoch: epoch})
		if err == nil || !strings.Contains(err.Error(), "$.ldflags[0]") || !strings.Contains(err.Error(), "does not require example.com/other") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("compile error leaves no cache entry", func(t *testing.T) {
		dir := copyComponent(t)
		if err := os.WriteFile(filepath.Join(dir, "cmd", "hello", "main.go"), []byte("package main\n\nfunc main() { undefined() }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		cc := newCache(t)
		_, err = c.Build(ctx, []string{"hello"}, Options{Cache: cc, Epoch: epoch})
		if err == nil || !strings.Contains(err.Error(), "undefined") {
			t.Fatalf("err = %v, want the compiler's message", err)
		}
		entries, _ := os.ReadDir(filepath.Join(cc.Root(), cacheKind))
		for _, e := range entries {
			t.Errorf("cache holds %s after a failed build", e.Name())
		}
	})
}
