package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
)

// buildKeyVersion changes whenever minimalImage makes different images from
// the same inputs, so that old cache entries are not reused.
const buildKeyVersion = "bundle-build/v1"

// goEnvVars are the go command's settings that change what it builds.
func goEnvVars() []string {
	return []string{"GOVERSION", "GOFLAGS", "GOEXPERIMENT", "GOAMD64", "GOARM", "GOARM64", "GO386"}
}

// key hashes everything the built image depends on: the recipe (binary
// name, entrypoint, env, epoch, platforms) and, for each platform, the go
// command's version and settings and the sources of the package and of its
// dependencies. Sources in local modules (the main module, directory
// replacements) are hashed file by file, named relative to their module so
// that the key does not depend on where the checkout is, together with the
// module's go.mod and go.sum; dependencies from the module cache are named
// by path@version (go.sum pins their content).
func (s *buildSource) key(ctx context.Context) (string, error) {
	if fi, err := os.Stat(s.dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory (paths are relative to the bundle file)", s.dir)
	}
	k := cache.NewKey(buildKeyVersion).
		String("binary", s.binaryName()).
		Strings("entrypoint", s.entrypoint()).
		Strings("env", s.spec.Env).
		String("epoch", s.epoch.UTC().Format(time.RFC3339))
	for _, p := range s.platforms {
		k.String("platform", p.String())
		if err := s.hashToolchain(ctx, k, p); err != nil {
			return "", err
		}
		if err := s.hashSources(ctx, k, p); err != nil {
			return "", err
		}
	}
	return k.Sum()
}

func (s *buildSource) hashToolchain(ctx context.Context, k *cache.Key, p v1.Platform) error {
	vars := goEnvVars()
	out, err := s.runGo(ctx, p, append([]string{"env", "-json"}, vars...)...)
	if err != nil {
		return err
	}
	var env map[string]string
	if err := json.Unmarshal(out, &env); err != nil {
		return fmt.Errorf("go env: %w", err)
	}
	for _, v := range vars {
		k.String("go:"+v, env[v])
	}
	return nil
}

// listedPackage is what `go list -json` says about a package.
type listedPackage struct {
	ImportPath string
	Name       string
	Dir        string
	Standard   bool
	GoFiles    []string
	SFiles     []string
	EmbedFiles []string
	SysoFiles  []string
	Module     *listedModule
}

type listedModule struct {
	Path    string
	Version string
	Dir     string
	GoMod   string
	Replace *listedModule
}

func (s *buildSource) hashSources(ctx context.Context, k *cache.Key, p v1.Platform) error {
	pkgs, err := s.listDeps(ctx, p)
	if err != nil {
		return err
	}
	if len(pkgs) == 0 || pkgs[len(pkgs)-1].Name != "main" {
		return fmt.Errorf("%s is not a main package", s.spec.Go)
	}
	modules := map[string]bool{}
	for _, pkg := range pkgs {
		if pkg.Standard {
			continue
		}
		mod := pkg.Module
		if mod == nil {
			return fmt.Errorf("package %s is not in a module; build sources need module mode", pkg.ImportPath)
		}
		if mod.Replace != nil {
			mod = mod.Replace
		}
		if mod.Version != "" {
			k.String("dependency", pkg.ImportPath+" "+mod.Path+"@"+mod.Version)
			continue
		}
		if !modules[mod.Dir] {
			modules[mod.Dir] = true
			hashModule(k, mod)
		}
		for _, f := range slices.Concat(pkg.GoFiles, pkg.SFiles, pkg.EmbedFiles, pkg.SysoFiles) {
			hashFile(k, mod, filepath.Join(pkg.Dir, f))
		}
	}
	return nil
}

// hashModule adds a local module's go.mod and go.sum.
func hashModule(k *cache.Key, mod *listedModule) {
	k.String("module", mod.Path)
	if mod.GoMod == "" {
		return
	}
	k.File(mod.Path+"/go.mod", mod.GoMod)
	sum := filepath.Join(filepath.Dir(mod.GoMod), "go.sum")
	if _, err := os.Stat(sum); err == nil {
		k.File(mod.Path+"/go.sum", sum)
	}
}

// hashFile adds a file named by its module path and its path in the module.
func hashFile(k *cache.Key, mod *listedModule, file string) {
	rel, err := filepath.Rel(mod.Dir, file)
	if err != nil {
		rel = file
	}
	k.File(mod.Path+"/"+filepath.ToSlash(rel), file)
}

// listDeps lists the package and its dependencies (the package last).
func (s *buildSource) listDeps(ctx context.Context, p v1.Platform) ([]listedPackage, error) {
	out, err := s.runGo(ctx, p, "list", "-deps",
		"-json=ImportPath,Name,Dir,Standard,GoFiles,SFiles,EmbedFiles,SysoFiles,Module", ".")
	if err != nil {
		return nil, err
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var pkg listedPackage
		err := dec.Decode(&pkg)
		if errors.Is(err, io.EOF) {
			return pkgs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		pkgs = append(pkgs, pkg)
	}
}

// runGo runs the go command in the package directory for platform p.
func (s *buildSource) runGo(ctx context.Context, p v1.Platform, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.goCmd, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), goEnv(p)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
