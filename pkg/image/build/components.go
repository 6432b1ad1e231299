package build

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/terrarium-os/terrarium/pkg/image/gobuild"
	"github.com/terrarium-os/terrarium/pkg/image/rootfs"
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

// buildComponents compiles the spec's component programs (each cached by
// its sources, so an unchanged one is never compiled again).
func (r *run) buildComponents(ctx context.Context) (string, error) {
	if len(r.spec.Components) == 0 {
		return "(none)", nil
	}
	compiled, total := 0, 0
	for _, sc := range r.spec.Components {
		c, err := gobuild.Load(ctx, r.spec.Resolve(sc.Component))
		if err != nil {
			return "", err
		}
		progs, err := c.Build(ctx, sc.Programs, gobuild.Options{Cache: r.opt.Cache, Epoch: r.spec.Epoch(), Log: r.opt.Log})
		if err != nil {
			return "", err
		}
		keys, err := c.Keys(ctx, sc.Programs, r.spec.Epoch())
		if err != nil {
			return "", err
		}
		for i, p := range progs {
			dest := strings.TrimPrefix(path.Join(sc.Dir, p.Name), "/")
			r.programs = append(r.programs, rootfs.Program{Src: p.Path, Dest: dest, Key: keys[i]})
			r.man.Components = append(r.man.Components, ComponentProgram{
				Component: c.Name(), Program: p.Name, Package: p.Package, Path: "/" + dest, Module: moduleOf(c, p.Package),
			})
			total++
			if !p.Cached {
				compiled++
			}
		}
	}
	if compiled == 0 {
		return fmt.Sprintf("%d programs (cached)", total), nil
	}
	return fmt.Sprintf("%d programs, %d compiled", total, compiled), nil
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
