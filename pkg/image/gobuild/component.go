// Package gobuild builds the programs of a component: a nested Go module
// under components/ that pins an upstream project (Kubernetes, etcd,
// containerd, ...) in its go.mod and says in component.yaml which programs
// it makes and with which build settings. Builds are reproducible
// (-trimpath, no build id, no VCS stamp, fixed ldflags) and cached by
// content hash, so an unchanged component is never compiled twice.
package gobuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/terrarium-os/terrarium/pkg/contract/strictyaml"
)

// ConfigFile is the name of a component's build settings, next to its go.mod.
const ConfigFile = "component.yaml"

// Config is a component's component.yaml.
type Config struct {
	// Programs maps each program's name (the installed file name) to its
	// main package's import path.
	Programs map[string]string `yaml:"programs"`
	// CGO enables cgo (a C toolchain and the libraries' -dev packages
	// must be installed); the default is a static, cgo-free build.
	CGO bool `yaml:"cgo,omitempty"`
	// Tags are build tags.
	Tags []string `yaml:"tags,omitempty"`
	// LDFlags are extra linker flags (typically -X version stamps). They
	// are templates: {{version "module/path"}} is that module's version
	// in go.mod (v1.2.3), {{semver "module/path"}} the same without the
	// "v", {{major ...}} and {{minor ...}} its parts, and {{.BuildDate}}
	// the build's SOURCE_DATE_EPOCH in RFC 3339.
	LDFlags []string `yaml:"ldflags,omitempty"`
}

// Component is a loaded component directory.
type Component struct {
	// Dir is the absolute path of the module directory.
	Dir    string
	Config Config
	// Requires maps each required module path to its version.
	Requires map[string]string
	// Module is the module path of the component itself.
	Module string
}

// Load reads the component in dir: its go.mod (through `go mod edit
// -json`, so the go command's own parser judges it) and component.yaml.
func Load(ctx context.Context, dir string) (*Component, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("component %s: %w", dir, err)
	}
	cfgPath := filepath.Join(abs, ConfigFile)
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("component %s: read %s: %w (a component is a Go module with a %s next to its go.mod)", dir, ConfigFile, err, ConfigFile)
	}
	c := &Component{Dir: abs}
	if err := strictyaml.Unmarshal(data, &c.Config); err != nil {
		if p, ok := errors.AsType[strictyaml.Problems](err); ok {
			return nil, p.WithLines(data).WithFile(cfgPath)
		}
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if len(c.Config.Programs) == 0 {
		return nil, fmt.Errorf("%s: $.programs: no programs; list each program's name and main package", cfgPath)
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "edit", "-json")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("component %s: read go.mod: %w%s", dir, err, stderrOf(err))
	}
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("component %s: parse go mod edit -json: %w", dir, err)
	}
	c.Module = mod.Module.Path
	c.Requires = map[string]string{}
	for _, r := range mod.Require {
		c.Requires[r.Path] = r.Version
	}
	return c, nil
}

// Name is the component's directory name.
func (c *Component) Name() string { return filepath.Base(c.Dir) }

// ProgramNames lists the component's programs in order.
func (c *Component) ProgramNames() []string {
	names := make([]string, 0, len(c.Config.Programs))
	for n := range c.Config.Programs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Version is the version of a required module, as go.mod pins it.
func (c *Component) Version(module string) (string, error) {
	v, ok := c.Requires[module]
	if !ok {
		return "", fmt.Errorf("component %s: go.mod does not require %s", c.Name(), module)
	}
	return v, nil
}

// ldflags renders the configured linker flags.
func (c *Component) ldflags(epoch time.Time) ([]string, error) {
	funcs := template.FuncMap{
		"version": c.Version,
		"semver": func(m string) (string, error) {
			v, err := c.Version(m)
			return strings.TrimPrefix(v, "v"), err
		},
		"major": func(m string) (string, error) { return versionPart(c, m, 0) },
		"minor": func(m string) (string, error) { return versionPart(c, m, 1) },
	}
	data := struct{ BuildDate string }{epoch.UTC().Format(time.RFC3339)}
	out := make([]string, 0, len(c.Config.LDFlags))
	for i, f := range c.Config.LDFlags {
		t, err := template.New("ldflags").Funcs(funcs).Option("missingkey=error").Parse(f)
		if err != nil {
			return nil, fmt.Errorf("%s: $.ldflags[%d]: %w", filepath.Join(c.Dir, ConfigFile), i, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("%s: $.ldflags[%d]: %w", filepath.Join(c.Dir, ConfigFile), i, err)
		}
		out = append(out, b.String())
	}
	return out, nil
}

func versionPart(c *Component, m string, i int) (string, error) {
	v, err := c.Version(m)
	if err != nil {
		return "", err
	}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) <= i {
		return "", fmt.Errorf("version %s of %s has no part %d", v, m, i)
	}
	return parts[i], nil
}

// checkPrograms verifies that every name is one of the component's programs.
func (c *Component) checkPrograms(names []string) error {
	for _, n := range names {
		if _, ok := c.Config.Programs[n]; !ok {
			return fmt.Errorf("component %s has no program %q (it has %s)", c.Name(), n, strings.Join(c.ProgramNames(), ", "))
		}
	}
	if i := firstDuplicate(names); i >= 0 {
		return fmt.Errorf("program %q is listed twice", names[i])
	}
	return nil
}

func firstDuplicate(names []string) int {
	for i := range names {
		if slices.Contains(names[:i], names[i]) {
			return i
		}
	}
	return -1
}

func stderrOf(err error) string {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok && len(ee.Stderr) > 0 {
		return "\n" + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
