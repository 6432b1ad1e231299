package build

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/image/cache"
	"github.com/terrarium-os/terrarium/pkg/image/gobuild"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
	"github.com/terrarium-os/terrarium/pkg/image/spec"
)

// ComponentProgram records one installed program in the manifest.
type ComponentProgram struct {
	Component string `json:"component"`
	Program   string `json:"program"`
	Package   string `json:"package"`
	// Path is where it is installed in the slot.
	Path string `json:"path"`
	// Module is the upstream module and version it was built from.
	Module string `json:"module,omitempty"`
}

// components are the programs a build compiled, for the slot and for
// manifest.json.
type components struct {
	programs []rootfs.Program
	manifest []ComponentProgram
}

// buildComponents compiles the spec's component programs (each cached by
// its sources, so an unchanged one is never compiled again).
func buildComponents(ctx context.Context, cache *cache.Cache, s *spec.Spec, log *slog.Logger) (components, string, error) {
	var out components
	if len(s.Components) == 0 {
		return out, "(none)", nil
	}
	compiled := 0
	for _, sc := range s.Components {
		c, err := gobuild.Load(ctx, s.Resolve(sc.Component))
		if err != nil {
			return components{}, "", err
		}
		progs, err := c.Build(ctx, sc.Programs, gobuild.Options{Cache: cache, Epoch: s.Epoch(), Log: log})
		if err != nil {
			return components{}, "", err
		}
		keys, err := c.Keys(ctx, sc.Programs, s.Epoch())
		if err != nil {
			return components{}, "", err
		}
		for i, p := range progs {
			dest := strings.TrimPrefix(path.Join(sc.Dir, p.Name), "/")
			out.programs = append(out.programs, rootfs.Program{Src: p.Path, Dest: dest, Key: keys[i]})
			out.manifest = append(out.manifest, ComponentProgram{
				Component: c.Name(), Program: p.Name, Package: p.Package, Path: "/" + dest, Module: moduleOf(c, p.Package),
			})
			if !p.Cached {
				compiled++
			}
		}
	}
	if compiled == 0 {
		return out, fmt.Sprintf("%d programs (cached)", len(out.programs)), nil
	}
	return out, fmt.Sprintf("%d programs, %d compiled", len(out.programs), compiled), nil
}

// moduleOf names the required module that provides pkg, with its version.
func moduleOf(c *gobuild.Component, pkg string) string {
	best := ""
	for m := range c.Requires {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	if best == "" {
		return c.Module
	}
	return best + "@" + c.Requires[best]
}
