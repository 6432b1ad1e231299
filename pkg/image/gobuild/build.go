package gobuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// keyVersion changes whenever the same inputs would build different bytes.
const keyVersion = "gobuild/v1"

// cacheKind is the cache directory of built programs.
const cacheKind = "programs"

// goEnvVars are the go command's settings that change what it builds.
var goEnvVars = []string{"GOVERSION", "GOOS", "GOARCH", "GOAMD64", "GOFLAGS", "GOEXPERIMENT", "CC", "CGO_CFLAGS", "CGO_LDFLAGS"}

// Options are a build's settings.
type Options struct {
	Cache *cache.Cache
	// Epoch is the build date stamped into versions ({{.BuildDate}}).
	Epoch time.Time
	Log   *slog.Logger
	// Output receives the go command's output (nil discards it; the
	// error carries its tail either way).
	Output io.Writer
}

// Program is a built program.
type Program struct {
	Name string
	// Package is the main package's import path.
	Package string
	// Path is the binary, inside the cache: treat it as read-only.
	Path string
	// Cached says that nothing was compiled for it.
	Cached bool
}

// Keys returns the cache key of each named program: a hash of everything
// its binary depends on (the component's files, go.mod and go.sum among
// them, the program, the linker flags and the toolchain).
func (c *Component) Keys(ctx context.Context, names []string, epoch time.Time) ([]string, error) {
	if err := c.checkPrograms(names); err != nil {
		return nil, err
	}
	flags, err := c.ldflags(epoch)
	if err != nil {
		return nil, err
	}
	toolchain, err := c.toolchain(ctx)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i], err = cache.NewKey(keyVersion).
			String("program", name).
			String("package", c.Config.Programs[name]).
			Strings("toolchain", toolchain).
			Strings("ldflags", flags).
			Strings("tags", c.Config.Tags).
			String("cgo", fmt.Sprint(c.Config.CGO)).
			Tree("module", c.Dir).
			Sum()
		if err != nil {
			return nil, fmt.Errorf("component %s: hash sources: %w", c.Name(), err)
		}
	}
	return keys, nil
}

// Build builds the named programs of c, each as its own cache entry, and
// returns them in the order asked.
func (c *Component) Build(ctx context.Context, names []string, opt Options) ([]Program, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	keys, err := c.Keys(ctx, names, opt.Epoch)
	if err != nil {
		return nil, err
	}
	flags, err := c.ldflags(opt.Epoch)
	if err != nil {
		return nil, err
	}
	out := make([]Program, 0, len(names))
	for i, name := range names {
		pkg := c.Config.Programs[name]
		start := time.Now()
		dir, cached, err := opt.Cache.Fill(ctx, cacheKind, keys[i], func(ctx context.Context, dir string) error {
			log.Info("compiling", "component", c.Name(), "program", name, "package", pkg)
			return c.goBuild(ctx, pkg, filepath.Join(dir, name), flags, opt.Output)
		})
		if err != nil {
			return nil, fmt.Errorf("build %s of component %s: %w", name, c.Name(), err)
		}
		if !cached {
			log.Info("compiled", "component", c.Name(), "program", name, "took", time.Since(start).Round(time.Second))
		}
		out = append(out, Program{Name: name, Package: pkg, Path: filepath.Join(dir, name), Cached: cached})
	}
	return out, nil
}

// env is the environment of every go command run for the component.
func (c *Component) env() []string {
	cgo := "0"
	if c.Config.CGO {
		cgo = "1"
	}
	return append(os.Environ(), "GOWORK=off", "CGO_ENABLED="+cgo, "GOOS=linux", "GOARCH=amd64")
}

// toolchain describes the compilers: the go command's settings and, with
// cgo, the C compiler's version.
func (c *Component) toolchain(ctx context.Context) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"env", "-json"}, goEnvVars...)...)
	cmd.Dir = c.Dir
	cmd.Env = c.env()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("component %s: go env: %w%s", c.Name(), err, stderrOf(err))
	}
	var env map[string]string
	if err := json.Unmarshal(out, &env); err != nil {
		return nil, fmt.Errorf("component %s: parse go env: %w", c.Name(), err)
	}
	t := make([]string, 0, len(goEnvVars)+1)
	for _, v := range goEnvVars {
		t = append(t, v+"="+env[v])
	}
	if c.Config.CGO {
		cc := env["CC"]
		if cc == "" {
			cc = "gcc"
		}
		v, err := exec.CommandContext(ctx, cc, "--version").Output()
		if err != nil {
			return nil, fmt.Errorf("component %s needs a C compiler (cgo): %s --version: %w", c.Name(), cc, err)
		}
		t = append(t, "cc="+strings.SplitN(string(v), "\n", 2)[0])
	}
	return t, nil
}

// goBuild compiles one main package reproducibly.
func (c *Component) goBuild(ctx context.Context, pkg, output string, ldflags []string, w io.Writer) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-mod=readonly",
		"-ldflags=" + strings.Join(append([]string{"-s", "-w", "-buildid="}, ldflags...), " ")}
	if len(c.Config.Tags) > 0 {
		args = append(args, "-tags="+strings.Join(c.Config.Tags, ","))
	}
	args = append(args, "-o", output, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = c.Dir
	cmd.Env = c.env()
	var tail tailBuffer
	cmd.Stdout, cmd.Stderr = &tail, &tail
	if w != nil {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&tail, w), io.MultiWriter(&tail, w)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, tail.String())
	}
	return nil
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }
