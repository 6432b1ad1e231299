package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/gobuild"
)

// componentKeyVersion changes whenever componentImage makes different
// images from the same inputs.
const componentKeyVersion = "bundle-component/v1"

// componentSource builds an image from programs of a component (see
// pkg/image/gobuild), optionally over a layer of Debian packages.
type componentSource struct {
	spec      BuildSource
	dir       string
	platforms []v1.Platform
	epoch     time.Time
	cache     func() (*cache.Cache, error)
	log       *slog.Logger
}

func (s *componentSource) String() string {
	return "build " + s.spec.Component + " (" + strings.Join(s.spec.Programs, ", ") + ")"
}

func (s *componentSource) binDir() string {
	if s.spec.BinDir != "" {
		return s.spec.BinDir
	}
	return "/usr/local/bin"
}

func (s *componentSource) entrypoint() []string {
	if len(s.spec.Entrypoint) > 0 {
		return s.spec.Entrypoint
	}
	return []string{path.Join(s.binDir(), s.spec.Programs[0])}
}

func (s *componentSource) load(ctx context.Context) (*gobuild.Component, error) {
	if len(s.platforms) != 1 || s.platforms[0].OS != "linux" || s.platforms[0].Architecture != "amd64" {
		return nil, fmt.Errorf("components build for linux/amd64 only; set the bundle's platforms to [linux/amd64]")
	}
	if fi, err := os.Stat(s.dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (paths are relative to the bundle file)", s.dir)
	}
	return gobuild.Load(ctx, s.dir)
}

func (s *componentSource) key(ctx context.Context) (string, error) {
	comp, err := s.load(ctx)
	if err != nil {
		return "", err
	}
	progs, err := comp.Keys(ctx, s.spec.Programs, s.epoch)
	if err != nil {
		return "", err
	}
	k := cache.NewKey(componentKeyVersion).
		Strings("programs", s.spec.Programs).
		Strings("program keys", progs).
		String("bin dir", s.binDir()).
		Strings("entrypoint", s.entrypoint()).
		Strings("env", s.spec.Env).
		String("epoch", s.epoch.UTC().Format(time.RFC3339)).
		String("platform", s.platforms[0].String())
	if d := s.spec.Debian; d != nil {
		dk, err := debianLayerKey(*d, s.epoch)
		if err != nil {
			return "", err
		}
		k.String("debian", dk)
	}
	return k.Sum()
}

func (s *componentSource) fetch(ctx context.Context) (artifact, func(), error) {
	comp, err := s.load(ctx)
	if err != nil {
		return artifact{}, nil, err
	}
	c, err := s.cache()
	if err != nil {
		return artifact{}, nil, err
	}
	progs, err := comp.Build(ctx, s.spec.Programs, gobuild.Options{Cache: c, Epoch: s.epoch, Log: s.log})
	if err != nil {
		return artifact{}, nil, err
	}
	var layers []mutate.Addendum
	created := v1.Time{Time: s.epoch}
	if d := s.spec.Debian; d != nil {
		l, err := debianLayerFromCache(ctx, c, *d, s.epoch, s.log)
		if err != nil {
			return artifact{}, nil, err
		}
		layers = append(layers, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: created, CreatedBy: "terrarium bundle: debian " + d.Suite + " " + strings.Join(d.Packages, " ")}})
	}
	files := []layerFile{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
	}
	bin := strings.Trim(s.binDir(), "/")
	if bin != "" {
		parts := strings.Split(bin, "/")
		for i := range parts {
			if d := strings.Join(parts[:i+1], "/"); d != "etc" {
				files = append(files, layerFile{name: d + "/", mode: 0o755, dir: true})
			}
		}
	}
	for _, p := range progs {
		data, err := os.ReadFile(p.Path)
		if err != nil {
			return artifact{}, nil, fmt.Errorf("read built %s: %w", p.Name, err)
		}
		files = append(files, layerFile{name: path.Join(bin, p.Name), mode: 0o755, data: data})
	}
	layer, err := filesLayer(files, s.epoch)
	if err != nil {
		return artifact{}, nil, err
	}
	layers = append(layers, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: created, CreatedBy: "terrarium bundle: go build " + strings.Join(s.spec.Programs, " ") + " (component " + comp.Name() + ")"}})
	img, err := imageOf(s.platforms[0], s.entrypoint(), s.spec.Env, s.epoch, layers)
	return artifact{image: img}, func() {}, err
}

// imageOf makes an OCI image of layers with the given run settings.
func imageOf(p v1.Platform, entrypoint, env []string, epoch time.Time, layers []mutate.Addendum) (v1.Image, error) {
	if !hasPath(env) {
		env = append([]string{defaultPath}, env...)
	}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Config:       v1.Config{Entrypoint: entrypoint, Env: env, WorkingDir: "/"},
		RootFS:       v1.RootFS{Type: "layers"},
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	base, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	img, err := mutate.Append(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("image layers: %w", err)
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: epoch})
	if err != nil {
		return nil, fmt.Errorf("image created time: %w", err)
	}
	return img, nil
}
