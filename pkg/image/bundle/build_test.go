package bundle

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// countingCompiler counts compilations. Without next it writes a fake
// binary made of the platform and the package's main.go.
type countingCompiler struct {
	calls int
	next  Compiler
}

func (c *countingCompiler) Compile(ctx context.Context, dir, out string, p v1.Platform) error {
	c.calls++
	if c.next != nil {
		return c.next.Compile(ctx, dir, out, p)
	}
	src, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		return err
	}
	return os.WriteFile(out, append([]byte(p.String()+"\n"), src...), 0o755)
}

// writeModule writes a Go module with a main package into dir.
func writeModule(t *testing.T, dir, mainSrc string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"go.mod": "module example.com/app\n\ngo 1.26\n", "main.go": mainSrc}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const helloMain = "package main\n\nfunc main() { println(\"hi\") }\n"

func buildBundle(t *testing.T, dir, goDir, extra string) *Bundle {
	t.Helper()
	return writeBundle(t, dir, fmt.Sprintf(
		"images:\n  - name: docker.io/library/app:1.0\n    source:\n      build:\n        go: %s\n%s", goDir, extra))
}

// TestBuildReproducible builds the hello test image twice with real go
// builds and fresh caches, and checks the digests match and the image is
// what the bundle asks for.
func TestBuildReproducible(t *testing.T) {
	hello, err := filepath.Abs(filepath.Join("..", "..", "..", "bundles", "testimages", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	b := buildBundle(t, t.TempDir(), hello, "        env: [FOO=bar]\n")
	var digests []v1.Hash
	var img v1.Image
	for range 2 {
		r := resolveOne(t, b, WithCacheDir(t.TempDir()), WithEpoch(testEpoch))
		digests = append(digests, r.Digest)
		img = r.Image
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds gave %s and %s; want the same digest", digests[0], digests[1])
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate: %v", err)
	}
	checkBuiltConfig(t, img, []string{"/hello"}, []string{defaultPath, "FOO=bar"})
	checkBuiltLayer(t, img, "hello")
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		out := runBinary(t, img, "hello")
		if out != "hello from terrarium\n" {
			t.Errorf("hello printed %q", out)
		}
	}
}

func checkBuiltConfig(t *testing.T, img v1.Image, entrypoint, env []string) {
	t.Helper()
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("media type %s, want OCI", mt)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, entrypoint) {
		t.Errorf("entrypoint %q, want %q", cfg.Config.Entrypoint, entrypoint)
	}
	if !reflect.DeepEqual(cfg.Config.Env, env) {
		t.Errorf("env %q, want %q", cfg.Config.Env, env)
	}
	if !cfg.Created.Time.Equal(testEpoch) || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("created %v on %s/%s, want %v on linux/amd64", cfg.Created, cfg.OS, cfg.Architecture, testEpoch)
	}
}

func checkBuiltLayer(t *testing.T, img v1.Image, binary string) {
	t.Helper()
	files := layerFiles(t, img)
	want := map[string]int64{"etc/": 0o755, "etc/passwd": 0o644, "etc/group": 0o644, binary: 0o755}
	if len(files) != len(want) {
		t.Errorf("layer has %d entries, want %d", len(files), len(want))
	}
	for name, mode := range want {
		h, ok := files[name]
		switch {
		case !ok:
			t.Errorf("layer lacks %s", name)
		case h.Mode != mode || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(testEpoch):
			t.Errorf("%s: mode %o uid %d gid %d mtime %v; want %o, root, %v", name, h.Mode, h.Uid, h.Gid, h.ModTime, mode, testEpoch)
		}
	}
}

// runBinary extracts the binary from the image's layer and runs it.
func runBinary(t *testing.T, img v1.Image, binary string) string {
	t.Helper()
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("binary %s not found: %v", binary, err)
		}
		if h.Name != binary {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), binary)
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(path).Output()
		if err != nil {
			t.Fatalf("run %s: %v", binary, err)
		}
		return string(out)
	}
}

// TestBuildCache checks that a cached recipe is not rebuilt and that every
// input of the recipe invalidates it.
func TestBuildCache(t *testing.T) {
	dir, cacheDir := t.TempDir(), t.TempDir()
	appDir := filepath.Join(dir, "app")
	writeModule(t, appDir, helloMain)
	write := func(name, content string) func() {
		return func() {
			if err := os.WriteFile(filepath.Join(appDir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	steps := []struct {
		name      string
		change    func()
		extra     string
		wantBuild bool
	}{
		{name: "first build", change: func() {}, wantBuild: true},
		{name: "unchanged", change: func() {}, wantBuild: false},
		{name: "non-source file", change: write("README.md", "notes\n"), wantBuild: false},
		{name: "source changed", change: write("main.go", helloMain+"// changed\n"), wantBuild: true},
		{name: "new source file", change: write("util.go", "package main\n"), wantBuild: true},
		{name: "go.mod changed", change: write("go.mod", "module example.com/app\n\ngo 1.26.0\n"), wantBuild: true},
		{name: "go.sum added", change: write("go.sum", ""), wantBuild: true},
		{name: "env changed", change: func() {}, extra: "        env: [A=1]\n", wantBuild: true},
		{name: "entrypoint changed", change: func() {}, extra: "        env: [A=1]\n        entrypoint: [/app, -v]\n", wantBuild: true},
		{name: "same again", change: func() {}, extra: "        env: [A=1]\n        entrypoint: [/app, -v]\n", wantBuild: false},
	}
	var last v1.Hash
	for _, step := range steps {
		step.change()
		c := &countingCompiler{}
		b := buildBundle(t, dir, "./app", step.extra)
		r := resolveOne(t, b, WithCacheDir(cacheDir), WithCompiler(c), WithEpoch(testEpoch))
		if built := c.calls > 0; built != step.wantBuild {
			t.Errorf("%s: compiled %d times, want build=%v", step.name, c.calls, step.wantBuild)
		}
		if !step.wantBuild && r.Digest != last {
			t.Errorf("%s: digest %s, want the cached %s", step.name, r.Digest, last)
		}
		last = r.Digest
	}
}

func TestBuildMultiPlatform(t *testing.T) {
	dir := t.TempDir()
	writeModule(t, filepath.Join(dir, "app"), helloMain)
	b := writeBundle(t, dir, "platforms: [linux/amd64, linux/arm64]\n"+
		"images:\n  - name: docker.io/library/app:1.0\n    source:\n      build: {go: ./app}\n")
	c := &countingCompiler{}
	r := resolveOne(t, b, WithCacheDir(t.TempDir()), WithCompiler(c))
	if c.calls != 2 || r.Index == nil || r.Image != nil {
		t.Fatalf("compiled %d times, index %v; want 2 compilations and an index", c.calls, r.Index != nil)
	}
	if err := validate.Index(r.Index); err != nil {
		t.Fatalf("validate: %v", err)
	}
	im, err := r.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range im.Manifests {
		got = append(got, d.Platform.String())
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !reflect.DeepEqual(got, want) {
		t.Errorf("index platforms %q, want %q", got, want)
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, appDir string)
		compiler Compiler
		want     []string
	}{
		{
			name:  "missing directory",
			setup: func(*testing.T, string) {},
			want:  []string{"docker.io/library/app:1.0: build ./app:", "is not a directory"},
		},
		{
			name:  "not a main package",
			setup: func(t *testing.T, d string) { writeModule(t, d, "package lib\n") },
			want:  []string{"build ./app: ./app is not a main package"},
		},
		{
			name: "compile error",
			setup: func(t *testing.T, d string) {
				writeModule(t, d, "package main\n\nvar x int = \"s\"\n\nfunc main() {}\n")
			},
			compiler: GoTool{},
			want:     []string{"go build for linux/amd64", "cannot use \"s\""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, filepath.Join(dir, "app"))
			b := buildBundle(t, dir, "./app", "")
			c := tt.compiler
			if c == nil {
				c = &countingCompiler{}
			}
			_, err := Resolve(context.Background(), b, WithCacheDir(t.TempDir()), WithCompiler(c))
			wantErr(t, err, tt.want...)
			if err != nil && strings.Count(err.Error(), "docker.io/library/app:1.0") != 1 {
				t.Errorf("error %q should name the image once", err)
			}
		})
	}
}
