package cache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultDir(t *testing.T) {
	t.Setenv(EnvDir, "/somewhere/cache")
	if got := DefaultDir(); got != "/somewhere/cache" {
		t.Errorf("DefaultDir() with %s set = %q, want /somewhere/cache", EnvDir, got)
	}
	t.Setenv(EnvDir, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got := DefaultDir(); got != filepath.Join("/xdg", "terrarium") {
		t.Errorf("DefaultDir() = %q, want /xdg/terrarium", got)
	}
}

func TestNewCreatesRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "b")
	c, err := New(root)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if c.Root() != root {
		t.Errorf("Root() = %q, want %q", c.Root(), root)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		t.Errorf("New did not create %s: %v", root, err)
	}
	if got, want := c.Path("rootfs", "abc"), filepath.Join(root, "rootfs", "abc"); got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	if _, ok := c.Lookup("rootfs", "abc"); ok {
		t.Error("Lookup found an entry in an empty cache")
	}
}

func TestNewFailsOnFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(filepath.Join(file, "cache")); err == nil {
		t.Error("New under a regular file succeeded")
	}
}

func TestFill(t *testing.T) {
	c, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := strings.Repeat("ab", 32)
	calls := 0
	fill := func(_ context.Context, dir string) error {
		calls++
		return os.WriteFile(filepath.Join(dir, "artifact"), []byte("content"), 0o644)
	}

	p, cached, err := c.Fill(ctx, "kind", key, fill)
	if err != nil {
		t.Fatalf("first Fill: %v", err)
	}
	if cached {
		t.Error("first Fill reported cached")
	}
	if p != c.Path("kind", key) {
		t.Errorf("first Fill path %q, want %q", p, c.Path("kind", key))
	}
	if b, err := os.ReadFile(filepath.Join(p, "artifact")); err != nil || string(b) != "content" {
		t.Errorf("entry content = %q, %v; want \"content\"", b, err)
	}

	p2, cached, err := c.Fill(ctx, "kind", key, func(context.Context, string) error {
		t.Error("second Fill called fill")
		return errors.New("must not be called")
	})
	if err != nil {
		t.Fatalf("second Fill: %v", err)
	}
	if !cached {
		t.Error("second Fill did not report cached")
	}
	if p2 != p {
		t.Errorf("second Fill path %q, want %q", p2, p)
	}
	if calls != 1 {
		t.Errorf("fill called %d times, want 1", calls)
	}
	if got, ok := c.Lookup("kind", key); !ok || got != p {
		t.Errorf("Lookup = %q, %v; want %q, true", got, ok, p)
	}
	assertNoTemp(t, filepath.Join(c.Root(), "kind"))
}

func TestFillShortKey(t *testing.T) {
	c, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, cached, err := c.Fill(context.Background(), "k", "ab", func(context.Context, string) error { return nil })
	if err != nil || cached || p != c.Path("k", "ab") {
		t.Errorf("Fill with a short key = %q, %v, %v", p, cached, err)
	}
}

func TestFillFailureLeavesNothing(t *testing.T) {
	c, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := strings.Repeat("cd", 32)
	boom := errors.New("boom")
	var tmp string
	_, cached, err := c.Fill(ctx, "kind", key, func(_ context.Context, dir string) error {
		tmp = dir
		if err := os.WriteFile(filepath.Join(dir, "half"), []byte("x"), 0o644); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Fill error = %v, want %v", err, boom)
	}
	if cached {
		t.Error("failed Fill reported cached")
	}
	if _, ok := c.Lookup("kind", key); ok {
		t.Error("failed Fill left an entry")
	}
	if tmp == "" || filepath.Dir(tmp) != filepath.Join(c.Root(), "kind") {
		t.Errorf("fill ran in %q, want a directory under %s", tmp, filepath.Join(c.Root(), "kind"))
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary dir %s still there: %v", tmp, err)
	}
	assertNoTemp(t, filepath.Join(c.Root(), "kind"))

	// A later successful fill works.
	calls := 0
	if _, cached, err := c.Fill(ctx, "kind", key, func(context.Context, string) error { calls++; return nil }); err != nil || cached || calls != 1 {
		t.Errorf("Fill after a failure: cached %v, err %v, calls %d", cached, err, calls)
	}
}

func TestFillContextPassedThrough(t *testing.T) {
	c, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	_, _, err = c.Fill(ctx, "kind", "key", func(got context.Context, _ string) error {
		if got.Value(ctxKey{}) != "v" {
			t.Error("fill did not get the caller's context")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// assertNoTemp fails if dir holds a leftover temporary directory.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary dir %s left in %s", e.Name(), dir)
		}
	}
}
