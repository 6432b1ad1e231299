package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Compiler builds a Go main package into a static binary for one platform.
type Compiler interface {
	Compile(ctx context.Context, pkgDir, output string, platform v1.Platform) error
}

// GoTool is the default Compiler: it runs
//
//	CGO_ENABLED=0 GOOS=<os> GOARCH=<arch> go build -trimpath -buildvcs=false -ldflags="-s -w -buildid=" -o <output> .
//
// in the package directory, which builds the same bytes from the same
// sources and toolchain wherever the sources are.
type GoTool struct {
	// Path of the go command; "" means "go" from $PATH.
	Path string
}

// Compile implements Compiler.
func (g GoTool) Compile(ctx context.Context, pkgDir, output string, p v1.Platform) error {
	goCmd := g.Path
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", output, ".")
	cmd.Dir = pkgDir
	cmd.Env = append(os.Environ(), goEnv(p)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// goEnv is the environment that makes the go command target p.
func goEnv(p v1.Platform) []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}
	switch {
	case p.Variant == "":
	case p.Architecture == "arm":
		env = append(env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	case p.Architecture == "amd64":
		env = append(env, "GOAMD64="+p.Variant)
	}
	return env
}

// buildSource builds an image from a Go main package. Its cache key hashes
// everything that goes into the image (see buildKey), so an unchanged
// recipe is never rebuilt.
type buildSource struct {
	spec      BuildSource
	dir       string
	platforms []v1.Platform
	epoch     time.Time
	compiler  Compiler
	goCmd     string
	log       *slog.Logger
}

func (s *buildSource) String() string { return "build " + s.spec.Go }

func (s *buildSource) binaryName() string { return filepath.Base(s.dir) }

func (s *buildSource) entrypoint() []string {
	if len(s.spec.Entrypoint) > 0 {
		return s.spec.Entrypoint
	}
	return []string{"/" + s.binaryName()}
}

func (s *buildSource) fetch(ctx context.Context) (artifact, func(), error) {
	if len(s.platforms) == 1 {
		img, err := s.buildImage(ctx, s.platforms[0])
		return artifact{image: img}, func() {}, err
	}
	adds := make([]mutate.IndexAddendum, 0, len(s.platforms))
	for _, p := range s.platforms {
		img, err := s.buildImage(ctx, p)
		if err != nil {
			return artifact{}, nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return artifact{index: idx}, func() {}, nil
}

// buildImage compiles the package for p and wraps the binary in an image.
func (s *buildSource) buildImage(ctx context.Context, p v1.Platform) (v1.Image, error) {
	tmp, err := os.MkdirTemp("", "terrarium-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, s.binaryName())
	start := time.Now()
	if err := s.compiler.Compile(ctx, s.dir, out, p); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("read built binary: %w", err)
	}
	s.log.Info("built Go binary", "package", s.spec.Go, "platform", p.String(),
		"bytes", len(bin), "took", time.Since(start).Round(time.Millisecond))
	return minimalImage(imageRecipe{
		binary:     bin,
		binaryName: s.binaryName(),
		platform:   p,
		entrypoint: s.entrypoint(),
		env:        s.spec.Env,
		epoch:      s.epoch,
		createdBy:  "terrarium bundle: go build " + s.spec.Go,
	})
}

// imageRecipe is everything a minimal image is made of.
type imageRecipe struct {
	binary     []byte
	binaryName string
	platform   v1.Platform
	entrypoint []string
	env        []string
	epoch      time.Time
	createdBy  string
}

// defaultPath is the PATH of built images whose env sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// minimalImage makes a single-layer OCI image holding the binary at
// /<name> and an /etc/passwd and /etc/group with root and nobody.
func minimalImage(r imageRecipe) (v1.Image, error) {
	layer, err := rootLayer(r.binaryName, r.binary, r.epoch)
	if err != nil {
		return nil, err
	}
	env := r.env
	if !hasPath(env) {
		env = append([]string{defaultPath}, env...)
	}
	cfg := &v1.ConfigFile{
		Architecture: r.platform.Architecture,
		OS:           r.platform.OS,
		Variant:      r.platform.Variant,
		Config:       v1.Config{Entrypoint: r.entrypoint, Env: env, WorkingDir: "/"},
		RootFS:       v1.RootFS{Type: "layers"},
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	created := v1.Time{Time: r.epoch}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: r.createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img, err = mutate.CreatedAt(img, created)
	if err != nil {
		return nil, fmt.Errorf("image created time: %w", err)
	}
	return img, nil
}

func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}
